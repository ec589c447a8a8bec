"""API keys: ``name:key`` entries name their key; bare keys are named by position."""

from __future__ import annotations

from pydantic import SecretStr

from reactq.producer.gateway_security import ApiKeys


def keys(*entries: str) -> ApiKeys:
    return ApiKeys([SecretStr(e) for e in entries])


def test_a_named_key_is_known_by_its_name_and_a_bare_one_by_its_position() -> None:
    k = keys("ops:secret-one", "plain-secret", "billing:b:with-colon")
    assert k.names == ["ops", "key2", "billing"]
    assert k.identify("secret-one") == "ops"
    assert k.identify("plain-secret") == "key2"
    # Only the first colon splits: the rest belongs to the key.
    assert k.identify("b:with-colon") == "billing"
    assert k.identify("ops:secret-one") is None  # the name is not part of the key
    assert k.identify("nope") is None and k.identify(None) is None and k.identify("") is None
    assert k.accepts("plain-secret") and not k.accepts("secret")


def test_an_entry_whose_prefix_is_not_a_name_is_a_bare_key() -> None:
    # A key that happens to hold a colon after something that cannot be a name
    # (a digit first, a space) is taken whole.
    k = keys("1abc:def", "has space:xyz")
    assert k.names == ["key1", "key2"]
    assert k.identify("1abc:def") == "key1" and k.identify("has space:xyz") == "key2"


def test_without_keys_every_token_is_accepted_and_nobody_is_named() -> None:
    k = keys()
    assert not k.enabled and k.accepts(None) and k.identify("anything") is None
    assert keys("", "  ").names == []
