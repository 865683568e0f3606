"""devshim's own backends' harnesses, one module ``<backend>_harness.py`` each, found by name by
the conformance suite (tests/devshim_conformance/harness.py defines ``Harness``, what each one
gives). A backend that lives outside devshim ships its harness in its own package
(docs/adapters.md)."""
