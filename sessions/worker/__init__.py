"""The worker process: the Django side of running MCP work, on the process's one pool.

Celery tasks (sessions/tasks.py) are one line each and land here. A task loads rows, builds a plain
`ServerConfig` (sessions/credentials.py), runs the MCP package's coroutines on the pool's loop,
records outcomes through actions and tells the person's pages (sessions/events.py), from the pool's
loop so events stay in order.

- runtime.py: the pool, its news as rows and events, and stopping the work in flight;
- tool_call.py: one call, from its claim to its recorded end;
- conversation.py: the person behind a running call (Cancel, forms, sampling);
- catalog.py: tools, Test connection, resources, prompts, completions, subscriptions;
- lane.py: warm calls handed straight to this worker, with no Celery task;
- liveness.py: the heartbeat, the sweep for the calls of dead workers, and the worker's stop.

Only worker processes import this package (and the embedded portal, which is one): web processes
send work by name (sessions/queue.py) and never load the MCP SDK.
"""

from .catalog import (
    execute_complete,
    execute_get_prompt,
    execute_list_prompts,
    execute_list_resources,
    execute_list_tools,
    execute_read_resource,
    execute_subscribe_resource,
    execute_test_connection,
    execute_unsubscribe_resource,
)
from .lane import close_lane, open_lane
from .liveness import Sweeper, forget_gone_local_workers, shutdown_pool, start_heartbeat, stop_heartbeat
from .runtime import get_pool, interrupt_calls, publish
from .tool_call import execute_tool_call

__all__ = [
    "Sweeper",
    "close_lane",
    "execute_complete",
    "execute_get_prompt",
    "execute_list_prompts",
    "execute_list_resources",
    "execute_list_tools",
    "execute_read_resource",
    "execute_subscribe_resource",
    "execute_test_connection",
    "execute_tool_call",
    "execute_unsubscribe_resource",
    "forget_gone_local_workers",
    "get_pool",
    "interrupt_calls",
    "open_lane",
    "publish",
    "shutdown_pool",
    "start_heartbeat",
    "stop_heartbeat",
]
