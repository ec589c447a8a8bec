"""Issue 32: the gateway's A2A 1.0 server (``/a2a/{agent}``) driven by the official
``a2a-sdk`` Python client over JSON-RPC against a real pool (`reactq serve`, real
workers, the scripted model): the cards, send, stream, get, list, cancel, subscribe
after a disconnect, ``input-required`` then resumed, tenant scoping, bad inputs."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError

from reactq.worker.agent.llm.replies import Reply
from tests.gateway_support import Gateway, start_gateway
from tests.helpers import running_pool
from tests.js_support import run_script
from tests.test_mcp_server import pool_model

pytestmark = pytest.mark.e2e

KEY = "a2a-key"
TENANT = "a2a-tenant"
KEYS = f"{KEY},acme:{TENANT};prefix=acme-"


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("a2a-server")
    with running_pool(
        redis_url,
        f"{namespace}-a2a",
        tmp,
        pool_model,
        agents="tests.mcp_servers.gateway_agents:agents",
    ) as env:
        # The push notifications' receiver is this test process, on 127.0.0.1.
        allow = {"REACTQ_WEBHOOK_ALLOW_HOSTS": "127.0.0.1:*"}
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEYS, **allow}, Path(tmp), KEY)
        try:
            yield gw
        finally:
            gw.stop()


@asynccontextmanager
async def connect(
    gateway: Gateway, agent: str = "helper", key: str = KEY, streaming: bool = False
) -> AsyncIterator[Client]:
    """The SDK's client for ``agent``, from its card, with ``key``."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60.0)
    config = ClientConfig(streaming=streaming, httpx_client=http)
    async with http:
        client = await create_client(
            f"{gateway.url}/a2a/{agent}",
            client_config=config,
            resolver_http_kwargs={"headers": {"Authorization": f"Bearer {key}"}},
        )
        async with client:
            yield client


def user(text: str, context_id: str = "", task_id: str = "") -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )
    return SendMessageRequest(message=message)


async def send(client: Client, request: SendMessageRequest) -> Task:
    """A blocking send's task (the one response of a non-streaming client)."""
    found = [r async for r in client.send_message(request)]
    assert len(found) == 1 and found[0].HasField("task"), found
    return found[0].task


def answer(task: Task) -> str:
    return task.artifacts[0].parts[0].text


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_cards(gateway: Gateway) -> None:
    card = httpx.get(
        f"{gateway.url}/a2a/helper/.well-known/agent-card.json", headers=gateway.headers()
    ).json()
    assert card["name"] == "helper"
    assert card["description"] == "Looks things up and answers questions about them."
    assert card["capabilities"]["streaming"] is True
    assert card["supportedInterfaces"][0]["url"].endswith("/a2a/helper")
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"
    assert {s["name"] for s in card["skills"]} == {"helper", "lookup", "pay"}
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    pool = httpx.get(f"{gateway.url}/.well-known/agent-card.json", headers=gateway.headers()).json()
    assert {s["id"] for s in pool["skills"]} == {"helper", "weather"}
    # No key: 401; an unknown agent: 404, as a JSON-RPC error.
    assert httpx.get(f"{gateway.url}/a2a/helper/.well-known/agent-card.json").status_code == 401
    missing = httpx.post(f"{gateway.url}/a2a/nobody", headers=gateway.headers(), json={})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == -32600


def test_send_continue_and_get(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway) as client:
            task = await send(client, user("hello"))
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer(task).startswith("answer to: hello (seen 1)")
            again = await send(client, user("more", context_id=task.context_id))
            assert again.context_id == task.context_id and again.id != task.id
            assert "(seen 2)" in answer(again)
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == TaskState.TASK_STATE_COMPLETED
            assert answer(got) == answer(task)
        async with connect(gateway, "weather") as client:
            task = await send(client, user("Paris"))
            data = task.artifacts[0].parts[1]
            assert dict(data.data.struct_value) == {"city": "Paris", "temp_c": 21.0}

    run(scenario())


def test_stream(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway, streaming=True) as client:
            seen: list[StreamResponse] = [r async for r in client.send_message(user("streamed"))]
        assert seen[0].HasField("task")
        assert seen[0].task.status.state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
        )
        artifacts = [r.artifact_update for r in seen if r.HasField("artifact_update")]
        assert artifacts and artifacts[0].artifact.parts[0].text.startswith("answer to: streamed")
        assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

    run(scenario())


def test_cancel_and_resubscribe(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway, streaming=True) as client:
            stream = client.send_message(user("sleep=30 long"))
            first = await anext(stream)
            task_id = first.task.id
            await stream.aclose()  # the client disconnects; the turn runs on
            again = client.subscribe(SubscribeToTaskRequest(id=task_id))
            resumed = await anext(again)
            assert resumed.task.id == task_id
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            rest = [r async for r in again]
            assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task_id))

    run(scenario())


def test_input_required_then_resumed(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway) as client:
            task = await send(client, user("pay now"))
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert "pay" in task.status.message.parts[0].text
            done = await send(client, user("approve", task.context_id, task.id))
            assert done.id == task.id
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert "paid 5" in answer(done)

    run(scenario())


def test_list_is_newest_first_and_scoped(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with connect(gateway, key=TENANT) as client:
            first = await send(client, user("one"))
            second = await send(client, user("two"))
            assert first.context_id.startswith("acme-")
            page = await client.list_tasks(ListTasksRequest(page_size=1))
            assert [t.id for t in page.tasks] == [second.id]
            following = await client.list_tasks(
                ListTasksRequest(page_size=1, page_token=page.next_page_token)
            )
            assert [t.id for t in following.tasks] == [first.id]
        async with connect(gateway) as client:
            # The pool's key reaches every session; its list is its own tasks.
            assert (await client.get_task(GetTaskRequest(id=first.id))).id == first.id
            theirs = await send(client, user("not the tenant's"))
            mine = await client.list_tasks(ListTasksRequest(page_size=100))
            assert theirs.id in {t.id for t in mine.tasks}
            assert first.id not in {t.id for t in mine.tasks}
        async with connect(gateway, key=TENANT) as client:
            listed = await client.list_tasks(ListTasksRequest(page_size=100))
            assert [t.id for t in listed.tasks] == [second.id, first.id]
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id=theirs.id))
            with pytest.raises(TaskNotFoundError):
                await send(client, user("approve", theirs.context_id, theirs.id))

    run(scenario())


def test_bad_inputs_are_jsonrpc_errors(gateway: Gateway) -> None:
    url = f"{gateway.url}/a2a/helper"
    headers = {**gateway.headers(), "A2A-Version": "1.0"}
    cases = {
        "not json": (b"{", -32700),
        "unknown method": (
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}}),
            -32601,
        ),
        "no parts": (
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "SendMessage",
                    "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}},
                }
            ),
            -32602,
        ),
        "unknown task": (
            json.dumps({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "nope"}}),
            -32001,
        ),
    }
    for name, (body, code) in cases.items():
        response = httpx.post(url, headers=headers, content=body)
        assert response.status_code < 500, (name, response.text)
        assert response.json()["error"]["code"] == code, (name, response.text)


def test_a2as_own_javascript_client_sends_streams_and_speaks_0_3(gateway: Gateway) -> None:
    seen = run_script("a2a_client.mjs", gateway.url, KEY, "helper", packages=("@a2a-js/sdk@1",))
    completed = int(TaskState.TASK_STATE_COMPLETED)
    assert seen["first"]["state"] == completed
    assert seen["first"]["answer"].startswith("answer to: hello js (seen 1)")
    assert seen["again"]["context"] == seen["first"]["context"]
    assert "(seen 2)" in seen["again"]["answer"]
    assert seen["got"]["state"] == completed
    assert seen["streamed"][0] == "task" and "artifactUpdate" in seen["streamed"]
    assert seen["streamed"][-1] == "statusUpdate"
    assert seen["streamedAnswer"].startswith("answer to: streamed js")
    assert seen["legacy"]["answer"].startswith("answer to: from 0.3")


class PushReceiver:
    """An HTTP server on 127.0.0.1 keeping every POST (headers, JSON body)."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.got.append((headers, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/push"

    def states(self, task_id: str) -> list[str]:
        out = []
        for _, body in self.got:
            if "task" in body and body["task"]["id"] == task_id:
                out.append(body["task"]["status"]["state"])
            elif "statusUpdate" in body and body["statusUpdate"]["taskId"] == task_id:
                out.append(body["statusUpdate"]["status"]["state"])
        return out

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_push_notifications_reach_a_local_receiver(gateway: Gateway) -> None:
    receiver = PushReceiver()

    async def until(task_id: str, state: str) -> list[str]:
        for _ in range(300):
            if state in receiver.states(task_id):
                return receiver.states(task_id)
            await asyncio.sleep(0.1)
        raise AssertionError(f"{task_id} never pushed {state}: {receiver.got}")

    async def scenario() -> None:
        async with connect(gateway) as client:
            # Registered with the send: the receiver gets the task's end, once.
            config = TaskPushNotificationConfig(
                url=receiver.url,
                token="tok-1",
                authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-1"),
            )
            request = user("pushed")
            request.configuration.task_push_notification_config.CopyFrom(config)
            request.configuration.return_immediately = True
            task = await send(client, request)
            states = await until(task.id, "TASK_STATE_COMPLETED")
            assert states.count("TASK_STATE_COMPLETED") == 1
            headers, body = next((h, b) for h, b in receiver.got if "task" in b)
            assert headers["x-a2a-notification-token"] == "tok-1"
            assert headers["authorization"] == "Bearer cred-1"
            assert body["task"]["artifacts"][0]["parts"][0]["text"].startswith("answer to: pushed")
            # Set on a running task, then read, listed and deleted through the client.
            slow = await send(client, _immediately(user("sleep=2 slow")))
            made = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=slow.id, url=receiver.url, token="tok-2")
            )
            assert made.id and made.task_id == slow.id
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=slow.id, id=made.id)
            )
            assert got.url == receiver.url
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=slow.id)
            )
            assert [c.id for c in listed.configs] == [made.id]
            await until(slow.id, "TASK_STATE_COMPLETED")
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=slow.id, id=made.id)
            )
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=slow.id)
            )
            assert list(listed.configs) == []
            # A URL no webhook could have is refused (a private address not allowed).
            with pytest.raises(InvalidParamsError):
                await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=slow.id, url="http://10.1.2.3/hook")
                )

    try:
        run(scenario())
    finally:
        receiver.stop()


def _immediately(request: SendMessageRequest) -> SendMessageRequest:
    request.configuration.return_immediately = True
    return request


def files_model(request: Mapping[str, Any]) -> Reply:
    """Write ``a2a.md``, then answer."""
    if request["messages"][-1]["role"] == "user":
        return Reply.tool_calls([("write_file", {"path": "a2a.md", "content": "from a2a\n"})])
    return Reply.text("wrote it")


def test_files_a_turn_changed_are_artifacts(redis_url: str, namespace: str, tmp_path: Path) -> None:
    env_extra = {"REACTQ_WORKSPACE_ROOT": str(tmp_path / "workspaces")}
    with running_pool(
        redis_url,
        f"{namespace}-a2a-files",
        tmp_path,
        files_model,
        agents="tests.bundle_agents:agent",
        **env_extra,
    ) as env:
        gw = start_gateway({**env, "REACTQ_API_KEYS": KEY}, tmp_path, KEY, name="a2a-files")
        try:

            async def scenario() -> tuple[Task, Task]:
                async with connect(gw, "files") as client:
                    task = await send(client, user("write it"))
                    return task, await client.get_task(GetTaskRequest(id=task.id))

            task, got = run(scenario())
        finally:
            gw.stop()
    assert answer(task) == "wrote it"
    for seen in (task, got):
        files = [a for a in seen.artifacts if a.name == "a2a.md"]
        assert len(files) == 1
        record = dict(files[0].parts[0].data.struct_value)
        assert record["path"] == "a2a.md" and record["kind"] == "created"
        assert "+from a2a" in record["diff"]
