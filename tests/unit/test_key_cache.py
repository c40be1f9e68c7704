"""The API-key cache: live keys kept for their TTL, never unknown ones, dropped on revocation."""

from __future__ import annotations

from rubricsvc.api.keycache import KeyCache
from rubricsvc.apikeys import _announce_revoked
from rubricsvc.models import ApiKey


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Store:
    """Keys by secret, counting the lookups the cache lets through."""

    def __init__(self, **keys: ApiKey | None) -> None:
        self.keys = keys
        self.lookups = 0

    def load(self, secret: str) -> ApiKey | None:
        self.lookups += 1
        return self.keys.get(secret)


def key(key_id: int) -> ApiKey:
    return ApiKey(id=key_id, name=f"k{key_id}", scopes=["read"])


def test_a_live_key_is_looked_up_once_per_ttl() -> None:
    clock, store = Clock(), Store(s1=key(1))
    cache = KeyCache(10, clock)
    assert cache.lookup("s1", store.load) is store.keys["s1"]
    clock.now += 9.9
    assert cache.lookup("s1", store.load) is store.keys["s1"]
    assert store.lookups == 1
    clock.now += 0.2  # past the TTL: looked up again, and what the database says counts
    store.keys["s1"] = None
    assert cache.lookup("s1", store.load) is None
    assert store.lookups == 2


def test_unknown_keys_are_never_kept() -> None:
    store = Store()
    cache = KeyCache(10, Clock())
    assert cache.lookup("nope", store.load) is None
    store.keys["nope"] = key(7)  # created since: admitted at once
    assert cache.lookup("nope", store.load) is store.keys["nope"]
    assert store.lookups == 2


def test_a_ttl_of_zero_looks_up_every_time() -> None:
    store = Store(s1=key(1))
    cache = KeyCache(0, Clock())
    for _ in range(3):
        assert cache.lookup("s1", store.load) is not None
    assert store.lookups == 3


def test_a_key_revoked_in_this_process_is_dropped_at_once() -> None:
    store = Store(s1=key(1), s2=key(2))
    cache = KeyCache(10, Clock())
    cache.lookup("s1", store.load)
    cache.lookup("s2", store.load)
    store.keys["s1"] = None
    _announce_revoked(1)  # what revoke_key does once its transaction commits
    assert cache.lookup("s1", store.load) is None
    assert cache.lookup("s2", store.load) is store.keys["s2"]  # others stay kept
    assert store.lookups == 3


def test_a_lookup_that_raced_a_revocation_is_not_kept() -> None:
    cache = KeyCache(10, Clock())
    stale = key(1)

    def load_then_revoked(_secret: str) -> ApiKey:
        cache.key_revoked(1)  # committed while the lookup was reading the still-live row
        return stale

    assert cache.lookup("s1", load_then_revoked) is stale
    store = Store(s1=None)
    assert cache.lookup("s1", store.load) is None
