"""The emulator's state: objects by resource, one global resourceVersion, a bounded watch history.

All methods are thread-safe. Objects are plain JSON dicts. A stored object is never changed in
place: a write stores a new dict, which may share unchanged parts with the old one, so readers
can encode objects outside the lock and history entries stay as they were. The fixture methods
(`put`, `get`, `list`, `remove`, `wait_for`) hand out deep copies, so a test cannot change the
store behind the server's back; the API methods the HTTP layer uses return `Change`s holding the
stored objects themselves, which their callers only read (copying every object served cost more
than serving it). Each stored object is kept as the change that made it what it is, so its JSON is
encoded at most once for the write's reply, the watches and later reads alike.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import functools
import json
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from hami.testing.kubeapi import errors
from hami.testing.kubeapi.objects import Obj, checked_body, keep_server_fields, type_of
from hami.testing.kubeapi.resources import RESOURCES, ResourceType, resolve
from hami.testing.kubeapi.selectors import Matcher, combined

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet


@dataclass(frozen=True)
class Change:
    """One write: what happened to which object at which resourceVersion. The watch history is a
    sequence of these, and the store keeps each object as the change that made it what it is."""

    rv: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: str  # ResourceType.key
    obj: Obj
    old: Obj | None  # the previous state, so selector watches can see objects leave their view

    @cached_property
    def obj_json(self) -> bytes:
        """`obj` as JSON, encoded once for all the watches that send it (stored objects never change)."""
        return json.dumps(self.obj).encode()


def _now() -> str:
    return _timestamp(int(time.time()))


@functools.lru_cache(maxsize=1)
def _timestamp(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


class Follower(Protocol):
    """A watch, as the store sees it (`watch.Feed`)."""

    def offer(self, change: Change) -> None:
        """A change of the followed resource; called with the store's lock held, in rv order."""

    def pump(self) -> None:
        """Called after each write of the followed resource, outside the lock."""

    def wake(self) -> None:
        """The store closed."""


def _rtype(resource: str | ResourceType) -> ResourceType:
    return resource if isinstance(resource, ResourceType) else resolve(resource)


class Store:
    def __init__(self, history: int = 1000) -> None:
        self._cond = threading.Condition()  # notified on every change, for `wait_for`
        # The watches of each resource; replaced, never changed, so writers read it without the lock.
        self._followers: dict[str, tuple[Follower, ...]] = {r.key: () for r in RESOURCES}
        self._rv = 0
        self._objects: dict[str, dict[tuple[str, str], Change]] = {r.key: {} for r in RESOURCES}
        self._history: deque[Change] = deque(maxlen=history)
        self._compacted = 0  # every change with rv <= this has left the history
        self.closed = False
        for ns in ("default", "kube-system"):
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # -- direct access for fixtures (no HTTP, no preconditions) ----------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def put(self, obj: Obj, resource: str | None = None) -> Obj:
        """Create or replace `obj` as given (status included); fills uid/timestamp/rv; emits a change."""
        rtype = _rtype(resource) if resource else type_of(obj)
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("put() needs metadata.name")
        if rtype.namespaced:
            meta.setdefault("namespace", "default")
        key = (meta.get("namespace", ""), meta["name"])
        with self._write(rtype.key):
            entry = self._objects[rtype.key].get(key)
            old = None if entry is None else entry.obj
            if old is not None:
                meta.setdefault("uid", old["metadata"]["uid"])
                meta.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"])
            return copy.deepcopy(self._commit(rtype, key, new, old).obj)

    def get(self, resource: str, name: str, namespace: str = "") -> Obj | None:
        rtype = _rtype(resource)
        with self._cond:
            found = self._objects[rtype.key].get((namespace if rtype.namespaced else "", name))
            return None if found is None else copy.deepcopy(found.obj)

    def list(
        self, resource: str, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> builtins.list[Obj]:
        rtype = _rtype(resource)
        items = self.snapshot(rtype, namespace, combined(rtype, label_selector, field_selector))[0]
        return [copy.deepcopy(item.obj) for item in items]

    def remove(self, resource: str, name: str, namespace: str = "") -> Obj | None:
        """Delete without preconditions; None when it was not there."""
        rtype = _rtype(resource)
        try:
            return copy.deepcopy(self.delete(rtype, namespace, name).obj)
        except errors.ApiError:
            return None

    def wait_for(
        self,
        resource: str,
        name: str,
        namespace: str = "",
        condition: Callable[[Obj | None], bool] = lambda obj: obj is not None,
        timeout: float = 10.0,
    ) -> Obj | None:
        """Block until `condition(object or None)` holds; returns that state; TimeoutError otherwise.

        E.g. `wait_for("pods", "p", "default", lambda p: bool(p and p["spec"].get("nodeName")))`.
        """
        rtype = _rtype(resource)
        key = (namespace if rtype.namespaced else "", name)

        def current() -> Obj | None:
            found = self._objects[rtype.key].get(key)
            return None if found is None else found.obj

        with self._cond:
            if not self._cond.wait_for(lambda: condition(copy.deepcopy(current())), timeout):
                raise TimeoutError(f"{rtype.key} {namespace}/{name}: condition not met in {timeout}s")
            return copy.deepcopy(current())

    def compact(self) -> None:
        """Forget the whole watch history: every watch from an older resourceVersion gets 410."""
        with self._cond:
            self._history.clear()
            self._compacted = self._rv

    # -- API semantics (raise errors.ApiError like the real server) ------------------------------

    def snapshot(
        self, rtype: ResourceType, namespace: str | None, match: Matcher
    ) -> tuple[builtins.list[Change], int]:
        with self._cond:
            items = [
                entry for (ns, _), entry in sorted(self._objects[rtype.key].items())
                if (namespace is None or ns == namespace) and match(entry.obj)
            ]
            return items, self._rv

    def read(self, rtype: ResourceType, namespace: str, name: str) -> Change:
        with self._cond:
            found = self._objects[rtype.key].get((namespace, name))
            if found is None:
                raise errors.not_found(rtype.plural, rtype.group, name)
            return found

    def create(self, rtype: ResourceType, namespace: str, obj: Obj) -> Change:
        """POST; takes `obj` over (the caller must not use it afterwards)."""
        new = checked_body(rtype, namespace, obj, None)
        meta = new["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
        if not meta.get("name"):
            raise errors.invalid(rtype.kind, "", "metadata.name",
                                 "Required value: name or generateName is required")
        name_problem = errors.invalid_name(rtype.key, str(meta["name"]))
        if name_problem:
            raise errors.invalid(rtype.kind, str(meta["name"]), "metadata.name", name_problem)
        meta.pop("resourceVersion", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        for transient in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        if rtype.key == "pods":
            new.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
            new["status"] = {"phase": "Pending"}
        elif rtype.key == "namespaces":
            new["status"] = {"phase": "Active"}
        key = (namespace, meta["name"])
        with self._write(rtype.key):
            if key in self._objects[rtype.key]:
                raise errors.already_exists(rtype.plural, rtype.group, meta["name"])
            return self._commit(rtype, key, new, None)

    def update(
        self, rtype: ResourceType, namespace: str, name: str, obj: Obj, subresource: str = ""
    ) -> Change:
        """PUT: replaces the object; a non-empty metadata.resourceVersion must be the current one.
        Takes `obj` over, as `create` does."""
        body = checked_body(rtype, namespace, obj, name)
        return self.modify(rtype, namespace, name, lambda _current: body, subresource)

    def modify(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[Obj], Obj],
        subresource: str = "",
    ) -> Change:
        """Read-modify-write under the lock; `change` gets the stored object and returns a new one
        without changing its argument (the patch functions only copy what they change).

        The resourceVersion the changed object carries is a precondition, as in the real API: a PUT
        body or a merge patch that sets metadata.resourceVersion fails with 409 when it is stale.
        """
        key = (namespace, name)
        with self._write(rtype.key):
            entry = self._objects[rtype.key].get(key)
            if entry is None:
                raise errors.not_found(rtype.plural, rtype.group, name)
            current = entry.obj
            new = change(current)
            meta = new.get("metadata")
            if not isinstance(meta, dict):
                raise errors.invalid(rtype.kind, name, "metadata", "Required value")
            wanted = meta.get("resourceVersion")
            if wanted not in (None, "") and str(wanted) != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.plural, rtype.group, name, errors.STALE)
            moved = rtype.namespaced and meta.get("namespace", namespace) != namespace
            if meta.get("name") != name or moved:
                raise errors.invalid(rtype.kind, name, "metadata.name", "field is immutable")
            if meta.get("uid", current["metadata"]["uid"]) != current["metadata"]["uid"]:
                raise errors.invalid(rtype.kind, name, "metadata.uid", "field is immutable")
            new = keep_server_fields(rtype, current, new, subresource)
            if new == current:
                return entry  # a no-op write does not bump resourceVersion
            return self._commit(rtype, key, new, current)

    def delete(self, rtype: ResourceType, namespace: str, name: str, precondition_rv: str = "") -> Change:
        key = (namespace, name)
        with self._write(rtype.key):
            entry = self._objects[rtype.key].get(key)
            if entry is None:
                raise errors.not_found(rtype.plural, rtype.group, name)
            current = entry.obj
            if precondition_rv and precondition_rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(
                    rtype.plural, rtype.group, name,
                    f"Precondition failed: ResourceVersion in precondition: {precondition_rv}, "
                    f"ResourceVersion in object meta: {current['metadata']['resourceVersion']}",
                )
            del self._objects[rtype.key][key]
            self._rv += 1
            gone = {**current, "metadata": {**current["metadata"], "resourceVersion": str(self._rv)}}
            return self._record(Change(self._rv, "DELETED", rtype.key, gone, current))

    # -- watch support ---------------------------------------------------------------------------

    def changes_since(self, rv: int, resource: str) -> tuple[builtins.list[Change], int]:
        """Changes of `resource` after `rv`, and the rv they bring the watcher to; 410 when too old."""
        with self._cond:
            if rv < self._compacted:
                raise errors.expired(rv, self._compacted + 1)
            found: builtins.list[Change] = []
            # Newest first, stopping at `rv`: a recent rv reads only what is new, not the history.
            for change in reversed(self._history):
                if change.rv <= rv:
                    break
                if change.resource == resource:
                    found.append(change)
            found.reverse()
            return found, max(rv, self._rv)

    def follow(self, resource: str, follower: Follower, start: Callable[[], None]) -> None:
        """Runs `start` (which reads what the watch begins with), then offers `follower` every
        later change of `resource`, with nothing committed in between; `start`'s errors propagate
        and nothing is followed."""
        with self._cond:
            start()
            self._followers[resource] = (*self._followers[resource], follower)

    def unfollow(self, resource: str, follower: Follower) -> None:
        with self._cond:
            self._followers[resource] = tuple(f for f in self._followers[resource] if f is not follower)

    def at_rv(self, use: Callable[[int], None]) -> None:
        """Calls `use(the current resourceVersion)` with nothing committed meanwhile."""
        with self._cond:
            use(self._rv)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()
            followers = [f for group in self._followers.values() for f in group]
        for follower in followers:
            follower.wake()

    # -- internals -------------------------------------------------------------------------------

    def _commit(self, rtype: ResourceType, key: tuple[str, str], new: Obj, old: Obj | None) -> Change:
        self._rv += 1
        meta = new["metadata"]
        meta["resourceVersion"] = str(self._rv)
        if "uid" not in meta:  # not setdefault: a uuid4 costs more than the rest of a commit
            meta["uid"] = str(uuid.uuid4())
        if "creationTimestamp" not in meta:
            meta["creationTimestamp"] = _now()
        new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
        change = Change(self._rv, "MODIFIED" if old else "ADDED", rtype.key, new, old)
        self._objects[rtype.key][key] = change
        return self._record(change)

    @contextlib.contextmanager
    def _write(self, resource: str) -> Iterator[None]:
        """The lock for a write to `resource`; after it, outside the lock, the writing thread
        sends what the write changed to the watches that can take it without blocking."""
        with self._cond:
            yield
        for follower in self._followers[resource]:
            follower.pump()

    def _record(self, change: Change) -> Change:
        if self._history.maxlen is not None and len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(change)
        for follower in self._followers[change.resource]:
            follower.offer(change)
        self._cond.notify_all()
        return change


__all__ = ["Change", "Obj", "Store"]
