"""``GET /v1/models``: the agents a key may use, as OpenAI lists models::

GET /v1/models                 {"object": "list", "data": [Model, ...]}
GET /v1/models/{model}         one of them (``reactq/<agent>`` or the bare name)  404
"""

from __future__ import annotations

from fastapi import APIRouter
from openai.types import Model

from reactq.producer.gateway.deps import GatewayDep, ScopeDep
from reactq.producer.gateway.openai_api.common import agent_of_model, model_id, visible_agents
from reactq.producer.gateway.scopes import listing
from reactq.shared.catalogue import AgentInfo

__all__ = ["router"]

router = APIRouter(tags=["openai: models"])


def _model(info: AgentInfo) -> Model:
    return Model(
        id=model_id(info.name),
        object="model",
        created=int(info.last_seen or 0),
        owned_by="reactq",
    )


@router.get("/models", dependencies=[listing()], summary="List the agents as models")
async def list_models(gateway: GatewayDep, scope: ScopeDep) -> dict[str, object]:
    """Every agent the key may use, as a model (``reactq/<agent>``), by name."""
    agents = await visible_agents(gateway, scope)
    return {"object": "list", "data": [_model(a).model_dump() for a in agents]}


@router.get(
    "/models/{model:path}", dependencies=[listing(inner=("model",))], summary="Retrieve a model"
)
async def retrieve_model(model: str, gateway: GatewayDep, scope: ScopeDep) -> Model:
    """One agent as a model; 404 ``model_not_found`` for one the key cannot use."""
    name = await agent_of_model(gateway, model, scope)
    info = next(a for a in await visible_agents(gateway, scope) if a.name == name)
    return _model(info)
