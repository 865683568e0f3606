"""A Griffe extension for devshim's docs site (mkdocs.yml loads it for mkdocstrings).

devshim's docstrings end with an ``Example:`` section of ``>>>`` lines. Griffe's Google-style
parser reads ``Examples:`` as a section of code examples, but a singular ``Example:`` as an
admonition whose text is Markdown, where ``>>>`` lines would render as nested quotes. This
extension reads a line that is exactly ``Example:`` as ``Examples:``, so every example renders
as code, without renaming the section in every docstring.
"""

from __future__ import annotations

import re

from griffe import Extension

_SINGULAR = re.compile(r"(?m)^(\s*)Example:[ \t]*$")


class ExampleSections(Extension):
    """Read ``Example:`` sections as Griffe's ``Examples:`` sections."""

    def on_object(self, *, obj, **kwargs) -> None:
        docstring = obj.docstring
        if docstring is not None and "Example:" in docstring.value:
            docstring.value = _SINGULAR.sub(r"\1Examples:", docstring.value)


_GUIDE = re.compile(r"(?<![\w/])(?<!\]\()docs/([\w-]+\.md)")


class GuideLinks(Extension):
    """Turn a docstring's mention of a guide page, ``docs/distributed.md``, into a link to it."""

    def on_object(self, *, obj, **kwargs) -> None:
        docstring = obj.docstring
        if docstring is not None and "docs/" in docstring.value:
            docstring.value = _GUIDE.sub(r"[docs/\1](../\1)", docstring.value)
