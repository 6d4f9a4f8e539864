"""``/api/cluster/moves``: blue-green moves of an instance (cluster/moves.py does them).

Leader-coordinated: a follower answers 307 to the leader (cluster/redirect.py),
which holds the moves; in single-node mode the node is its own leader.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.status import HTTP_202_ACCEPTED

from sardeenz.api.deps import ServicesDep
from sardeenz.cluster.move_types import Move, MoveRequest
from sardeenz.security.policy import ADMIN, READONLY

router = APIRouter(prefix="/api/cluster/moves", tags=["cluster"])

START_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "`move_to_itself` (same pod, same GPUs), `unknown_gpu`, invalid body"},
    404: {"description": "`instance_not_found`, `pod_not_found`"},
    409: {"description": "`instance_moving`, `instance_not_active`"},
    503: {"description": "`pod_unavailable` (the target pod), `no_leader`"},
}


@router.post(
    "",
    dependencies=[ADMIN],
    status_code=HTTP_202_ACCEPTED,
    response_model=Move,
    responses=START_ERRORS,
)
async def start_move(body: MoveRequest, services: ServicesDep) -> Move:
    """Move an instance to another pod (or other GPUs of its pod) without failing a request.

    Answers at once with the move in `pending`; follow it with `GET .../{id}`:
    `starting-target`, `switching`, `draining`, `unloading-source`, then `done`
    or `failed` (with `reason` and `code`; the source keeps serving).
    """
    return await services.moves.start(body)


@router.get("", response_model=list[Move], dependencies=[READONLY])
async def list_moves(services: ServicesDep) -> list[Move]:
    """Moves this leader ran or runs, newest first, with state, steps and timing."""
    return services.moves.list()


@router.get(
    "/{move_id}",
    response_model=Move,
    dependencies=[READONLY],
    responses={404: {"description": "`move_not_found`"}},
)
async def get_move(move_id: str, services: ServicesDep) -> Move:
    """One move: its `state`, its steps with timestamps, the reason of a failure."""
    return services.moves.get(move_id)
