"""Issue 20, item 6: the long-term store over HTTP, on a real `reactq serve` with a
SQLite state database, and what scoped keys reach of it (item 7): a tenant's key its
namespaces only (404 for the rest, as for a missing document), a read-only key no
write."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.gateway_support import Gateway, start_gateway

pytestmark = pytest.mark.e2e

API_KEYS = "admin:admin-key,acme:acme-key;prefix=acme-,acmero:acme-ro-key;prefix=acme-;ro"


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("store-gateway")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-store",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_API_KEYS": API_KEYS,
    }
    with start_gateway(env, Path(tmp), "admin-key") as gw:
        yield gw


def as_key(gateway: Gateway, key: str) -> httpx2.Client:
    return gateway.client(key)


def test_put_get_search_delete(gateway: Gateway) -> None:
    ns = f"users.u-{uuid.uuid4().hex[:8]}"
    with gateway.client() as http:
        put = http.put(f"/v1/store/{ns}/diet", json={"value": {"text": "vegetarian", "k": 1}})
        assert put.status_code == 200, put.text
        assert put.json()["namespace"] == ns.split(".")
        http.put(f"/v1/store/{ns}/pet", json={"value": {"text": "a cat named Tom", "k": 2}})
        http.put(f"/v1/store/{ns}/pref-tea", json={"value": {"text": "green tea", "k": 1}})

        got = http.get(f"/v1/store/{ns}/diet")
        assert got.status_code == 200 and got.json()["value"] == {"text": "vegetarian", "k": 1}

        everything = http.get(f"/v1/store/{ns}", params={"limit": 2}).json()
        assert [d["key"] for d in everything["documents"]] == ["diet", "pet"]
        rest = http.get(f"/v1/store/{ns}", params={"cursor": everything["next_cursor"]}).json()
        assert [d["key"] for d in rest["documents"]] == ["pref-tea"]
        assert rest["next_cursor"] is None
        by_field = http.get(f"/v1/store/{ns}", params={"filter": "k=1"}).json()
        assert [d["key"] for d in by_field["documents"]] == ["diet", "pref-tea"]
        by_text = http.get(f"/v1/store/{ns}", params={"query": "CAT"}).json()
        assert [d["key"] for d in by_text["documents"]] == ["pet"]
        by_prefix = http.get(f"/v1/store/{ns}", params={"prefix": "pref-"}).json()
        assert [d["key"] for d in by_prefix["documents"]] == ["pref-tea"]

        deleted = http.delete(f"/v1/store/{ns}/diet")
        assert deleted.status_code == 200 and deleted.json()["key"] == "diet"
        gone = http.get(f"/v1/store/{ns}/diet")
        assert gone.status_code == 404 and gone.json()["code"] == "document_not_found"
        assert http.delete(f"/v1/store/{ns}/diet").status_code == 404


def test_bad_input_is_422_with_its_code(gateway: Gateway) -> None:
    with gateway.client() as http:
        for path in ["/v1/store/users..x/k", "/v1/store/a%20b/k", "/v1/store/users/k%20k"]:
            answer = http.put(path, json={"value": {}})
            assert answer.status_code == 422, (path, answer.text)
        not_object = http.put("/v1/store/users/k", json={"value": [1, 2]})
        assert not_object.status_code == 422
        bad_cursor = http.get("/v1/store/users", params={"cursor": "nope"})
        assert bad_cursor.status_code == 422 and bad_cursor.json()["code"] == "invalid_cursor"
        unknown = http.get("/v1/store/users", params={"fliter": "a=1"})
        assert unknown.status_code == 422 and unknown.json()["field"] == "query.fliter"
        assert http.get("/v1/store/users/never-put").status_code == 404


def test_a_tenant_key_reaches_its_namespaces_only(gateway: Gateway) -> None:
    tag = uuid.uuid4().hex[:8]
    mine, theirs = f"acme-users.u-{tag}", f"globex-users.u-{tag}"
    with gateway.client() as admin:
        assert admin.put(f"/v1/store/{theirs}/k", json={"value": {"x": 1}}).status_code == 200
    routes = [
        ("PUT", "/v1/store/{ns}/k", {"value": {"x": 2}}, 200),
        ("GET", "/v1/store/{ns}/k", None, 200),
        ("GET", "/v1/store/{ns}", None, 200),
        ("DELETE", "/v1/store/{ns}/k", None, 200),
    ]
    with as_key(gateway, "acme-key") as acme:
        for method, path, body, allowed in routes:
            ok = acme.request(method, path.format(ns=mine), json=body)
            assert ok.status_code == allowed, (method, path, ok.text)
            hidden = acme.request(method, path.format(ns=theirs), json=body)
            assert hidden.status_code == 404, (method, path, hidden.text)
            assert hidden.json()["code"] == "document_not_found"
    with gateway.client() as admin:  # the other tenant's document is untouched
        assert admin.get(f"/v1/store/{theirs}/k").json()["value"] == {"x": 1}
        admin.put(f"/v1/store/{mine}/k", json={"value": {"x": 3}})
    with as_key(gateway, "acme-ro-key") as reader:
        assert reader.get(f"/v1/store/{mine}/k").json()["value"] == {"x": 3}
        assert reader.get(f"/v1/store/{mine}").status_code == 200
        for method, body in [("PUT", {"value": {"x": 4}}), ("DELETE", None)]:
            refused = reader.request(method, f"/v1/store/{mine}/k", json=body)
            assert refused.status_code == 403 and refused.json()["code"] == "read_only"
        assert reader.get(f"/v1/store/{theirs}/k").status_code == 404
    with gateway.client() as admin:
        assert admin.get(f"/v1/store/{mine}/k").json()["value"] == {"x": 3}
