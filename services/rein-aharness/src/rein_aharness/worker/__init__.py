"""The worker loop: replay pending closes, claim, execute inside the grant, close, announce."""

from rein_aharness.worker.app import (
    Transports,
    WorkerRuntime,
    load_worker_catalogue,
    open_worker,
    run_worker,
)
from rein_aharness.worker.closer import Closer, CloseReport
from rein_aharness.worker.events import EventSink, HttpEventSink, LogEventSink, event_name
from rein_aharness.worker.loop import Worker, WorkerConfig
from rein_aharness.worker.processor import RunProcessor, RunReport

__all__ = [
    "CloseReport",
    "Closer",
    "EventSink",
    "HttpEventSink",
    "LogEventSink",
    "RunProcessor",
    "RunReport",
    "Transports",
    "Worker",
    "WorkerConfig",
    "WorkerRuntime",
    "event_name",
    "load_worker_catalogue",
    "open_worker",
    "run_worker",
]
