"""GuardHooks' save/patch/restore, which every backend's guard.py uses: on plain Python objects."""

from __future__ import annotations

import types

from devshim.guard.hooks import GuardHooks, is_wrapper, mark_wrapper, original_of


class Base:
    def read(self):
        return "base"


class Owner(Base):
    def write(self):
        return "own"


def _module():
    module = types.ModuleType("framework_stand_in")
    module.execute = lambda: "executed"
    return module


class OneHooks(GuardHooks):
    def install(self) -> None:
        if not self.patched():
            self.patch(Owner, "write", mark_wrapper(lambda self: "guarded write", Owner.__dict__["write"]))
            self.patch(Owner, "read", lambda self: "guarded read")  # inherited: Owner has none of its own


class OtherHooks(GuardHooks):
    def install(self) -> None:
        pass


def test_uninstall_puts_back_own_attributes_and_removes_inherited_ones():
    own = Owner.__dict__["write"]
    hooks = OneHooks()
    hooks.install()
    assert Owner().write() == "guarded write" and Owner().read() == "guarded read"
    assert original_of(Owner.__dict__["write"]) is own
    assert hooks.original(Owner, "write") is own and hooks.original(Owner, "read") is None
    hooks.uninstall()
    assert Owner.__dict__["write"] is own and "read" not in Owner.__dict__
    assert Owner().read() == "base" and not hooks.patched()


def test_module_attributes_are_restored_last_patched_first():
    module = _module()
    own = module.execute
    hooks = OtherHooks()
    hooks.patch(module, "execute", lambda: "first")
    hooks.patch(module, "execute", lambda: "second")  # patched again: what the module had first is kept
    assert module.execute() == "second" and hooks.patched(module, "execute")
    hooks.restore()
    assert module.execute is own and not hooks.patched(module, "execute")


def test_what_is_patched_is_kept_per_hooks_class_shared_by_its_instances():
    first, second = OneHooks(), OneHooks()
    first.install()
    try:
        assert second.patched() and not OtherHooks().patched()
        second.install()  # already in: no second wrapper around the first
        assert not is_wrapper(original_of(Owner.__dict__["write"]))
        assert Owner().write() == "guarded write"
    finally:
        second.uninstall()
    assert not first.patched() and Owner().write() == "own"
