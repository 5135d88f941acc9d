"""simtree-client: drive a simtree server from Python and read its trees as pandas tables.

    from simtree_client import Client
    client = Client("http://127.0.0.1:8090")
    tree = client.create(scenario="council", seed=1)
    child = tree.root.advance(3)
    child.events_frame()

See docs/python.md in the simtree repository.
"""

from . import frames, models
from .client import AsyncClient, Client, Datasets, Exploration, Library, Node, ReplayCheck, Sweep, Tree
from .errors import (
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    SimtreeError,
    Unauthorized,
    Unavailable,
    Unprocessable,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Client",
    "Conflict",
    "Datasets",
    "Exploration",
    "Forbidden",
    "Library",
    "Node",
    "NotFound",
    "PayloadTooLarge",
    "ReplayCheck",
    "SimtreeError",
    "Sweep",
    "Tree",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "frames",
    "models",
]
