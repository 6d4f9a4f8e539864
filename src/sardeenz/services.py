"""The services of one node, built once by the app and shared by routers."""

from __future__ import annotations

from dataclasses import dataclass

from sardeenz.config import Settings
from sardeenz.events import EventBus
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.routing import RoutingTable, RoutingUpdater
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.auth import ApiKeys, Authenticator
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
    routing: RoutingTable
    proxy: InferenceProxy
    routing_updater: RoutingUpdater
    auth: Authenticator
    api_keys: ApiKeys
    started: bool = False
    stopping: bool = False
