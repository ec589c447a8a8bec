"""API keys: ``name:key`` entries name their key; bare keys are named by position;
``;`` adds scopes (a tenant's session prefix, the agents allowed, read-only)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from reactq.producer.gateway.security import ApiKeys
from reactq.shared.errors import ConfigError


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


def test_an_entry_carries_scopes_after_semicolons() -> None:
    k = keys(
        "acme:acme-key;prefix=acme-;agents=support|billing.v2;ro",
        "globex:gx-key;prefix=globex-",
        "plain",
        "ops:ops-key",
    )
    assert k.names == ["acme", "globex", "key3", "ops"]
    acme = k.scope("acme-key")
    assert acme is not None and acme.name == "acme"
    assert (acme.prefix, acme.agents, acme.read_only) == (
        "acme-",
        frozenset({"support", "billing.v2"}),
        True,
    )
    assert acme.sees_session("acme-1") and not acme.sees_session("globex-1")
    assert acme.may_run("support") and not acme.may_run("other")
    globex = k.scope("gx-key")
    assert globex is not None and globex.agents is None and not globex.read_only
    assert globex.may_run("anything") and not globex.unrestricted
    # Keys without scopes keep full access.
    for token in ("plain", "ops-key"):
        scope = k.scope(token)
        assert scope is not None and scope.unrestricted
        assert scope.sees_session("any") and scope.may_run("any") and not scope.read_only
    assert k.identify("acme-key") == "acme" and k.scope("nope") is None
    # A bare key may carry scopes too; it is named by its position.
    bare = keys("k-1;ro").scope("k-1")
    assert bare is not None and bare.name == "key1" and bare.read_only


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("ops:k;prefix=", "prefix="),
        ("ops:k;prefix=a b", "prefix="),
        ("ops:k;agents=", "agents="),
        ("ops:k;agents=a||b", "agents="),
        ("ops:k;ro=yes", "'ro=yes'"),
        ("ops:k;tenant=acme", "'tenant=acme'"),
        ("ops:k;ro;ro", "twice"),
        ("ops:k;", "empty scope"),
        ("ops:;ro", "no key"),
        (";ro", "no key"),
    ],
)
def test_a_malformed_entry_is_a_config_error_that_does_not_show_the_key(
    entry: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        keys("good:fine", entry)
    message = caught.value.message
    assert "REACTQ_API_KEYS" in message and "entry 2" in message and says in message
    assert "fine" not in message
