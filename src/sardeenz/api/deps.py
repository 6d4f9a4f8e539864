"""FastAPI dependencies: one way for a router to reach the node's services."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from sardeenz.services import Services


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
