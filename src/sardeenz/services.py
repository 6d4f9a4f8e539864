"""The services of one node, built once by the app and shared by routers."""

from __future__ import annotations

from dataclasses import dataclass

from sardeenz.config import Settings
from sardeenz.events import EventBus
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.store.db import Database


@dataclass
class Services:
    settings: Settings
    bus: EventBus
    db: Database
    supervisor: Supervisor
    started: bool = False
    stopping: bool = False
