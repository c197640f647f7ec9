"""The config's base model, frozen all the way down.

`frozen=True` stops `config.section = ...` but not `config.models.filter.base_urls.append(...)`: a
list or dict field stays mutable, on an object the config cache shares across the process. Every
section derives from `FrozenModel`: after validation, and in `model_copy(update=...)`, its lists
become tuples and its dicts `FrozenDict`s (values too, at any depth), so such a mutation raises.
Serialised, they are lists and dicts again (JSON, YAML and the settings digests are unchanged).
"""

from __future__ import annotations

from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, model_validator


class FrozenDict(dict):
    """A dict whose mutators raise; reads, `dict(...)`, `{**d}` and `json.dumps` work as on a dict."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a resolved config is frozen: build a new one with model_copy(update=...)")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):  # pickle and deepcopy rebuild it whole (not item by item)
        return (FrozenDict, (dict(self),))


def freeze(value: Any) -> Any:
    """Lists, tuples and sets -> tuples, dicts -> FrozenDicts, recursively; anything else as is."""
    if isinstance(value, dict):
        return value if type(value) is FrozenDict else FrozenDict({k: freeze(v) for k, v in value.items()})
    if type(value) in (list, tuple, set, frozenset):  # a NamedTuple keeps its type
        return tuple(freeze(v) for v in value)
    return value


class FrozenModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _freeze_fields(self) -> FrozenModel:
        for name in type(self).model_fields:
            value = getattr(self, name)
            frozen = freeze(value)
            if frozen is not value:
                object.__setattr__(self, name, frozen)  # the model itself is frozen: set once, here
        return self

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        """As pydantic's, with the updated values frozen too (model_copy does not validate them)."""
        update = {k: freeze(v) for k, v in update.items()} if update else update
        return super().model_copy(update=update, deep=deep)
