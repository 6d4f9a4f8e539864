"""The services of one node, built once by the app and shared by routers."""

from __future__ import annotations

from dataclasses import dataclass

from sardeenz.config import Settings
from sardeenz.events import EventBus
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.store.db import Database


@dataclass
class Services:
    settings: Settings
    bus: EventBus
    db: Database
    supervisor: Supervisor
    inventory: GpuInventory
    segments: SegmentTracker
    kvctl: Kvctl
    started: bool = False
    stopping: bool = False
