#!/usr/bin/env python3
"""Talks to a toolserver's /mcp with the official MCP Python SDK (`mcp`) and
prints what it saw as one JSON line.

    MCP_URL=http://host/mcp MCP_TOKEN=<jwt> python mcp_client.py <command> [args]

    list                    every tool, following nextCursor
    call <tool> <json>      a call from a client that declares the tasks
                            extension: prints {progress, result, order, task,
                            polls}; `task` is the task the server answered
                            with (null when it answered inline), `polls` what
                            each tasks/get said until the task ended
    discover                the SDK's OAuth protected-resource discovery: each
                            well-known URL it tries and the document it
                            accepted there (null when it refused it)

The SDK has no tasks extension of its own: `Tasks` below is a small one on
its extension interface, claiming `resultType: "task"` and polling
`tasks/get` every `pollIntervalMs` until the task ends. Like Python
`fastmcp-tasks`, its `tasks/get` requests carry no `Mcp-Name` header.

Errors print as {"error": {"code", "message"}} with exit code 0, so the
caller can tell a protocol error from a crash.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, Literal

import httpx2
import mcp_types
from mcp import Client, MCPError
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
    handle_protected_resource_response,
)
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


class TaskFields(mcp_types.Result):
    """The task fields of a `CreateTaskResult` and of a `tasks/get` answer."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    task_id: str = Field(alias="taskId")
    status: str
    created_at: str = Field(alias="createdAt")
    last_updated_at: str = Field(alias="lastUpdatedAt")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")
    status_message: str | None = Field(default=None, alias="statusMessage")


class CreatedTask(TaskFields):
    """A `tools/call` answered with a task."""

    result_type: Literal["task"] = Field(alias="resultType")


class PolledTask(TaskFields):
    """A `tasks/get` answer."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskParams(mcp_types.RequestParams):
    """`tasks/get` params: the task id."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(serialization_alias="taskId")


class GetTask(mcp_types.Request[TaskParams, Literal["tasks/get"]]):
    """`tasks/get`, sent without `Mcp-Name` (no `name_param`)."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class Tasks(ClientExtension):
    """The client side of the tasks extension: declares it, and finishes a
    call answered with a task by polling it to its end. Keeps what it saw."""

    identifier = TASKS

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.polls: list[dict[str, Any]] = []

    def settings(self) -> dict[str, Any]:
        return {}

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.finish)]

    async def finish(self, created: CreatedTask, ctx: ClaimContext) -> mcp_types.CallToolResult:
        self.created.append(created.model_dump(by_alias=True, exclude_none=True))
        interval = created.poll_interval_ms
        while True:
            await asyncio.sleep((interval or 500) / 1000)
            polled = await ctx.session.send_request(
                GetTask(params=TaskParams(task_id=created.task_id)), PolledTask
            )
            self.polls.append(polled.model_dump(by_alias=True, exclude_none=True))
            interval = polled.poll_interval_ms or interval
            if polled.status == "completed" and polled.result is not None:
                return mcp_types.CallToolResult.model_validate(polled.result)
            if polled.status in TERMINAL:
                message = json.dumps(polled.error) if polled.error else polled.status
                return mcp_types.CallToolResult(
                    content=[mcp_types.TextContent(type="text", text=message)], is_error=True
                )


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def http_client() -> httpx2.AsyncClient:
    token = os.environ.get("MCP_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return create_mcp_http_client(headers=headers)


async def list_tools(client: Client) -> dict[str, Any]:
    tools: list[Any] = []
    cursor = None
    pages = 0
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.extend(dump(tool) for tool in page.tools)
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            break
    return {"tools": tools, "pages": pages, "protocolVersion": client.session.protocol_version}


async def call(client: Client, tasks: Tasks, name: str, arguments: str) -> dict[str, Any]:
    progress: list[dict[str, Any]] = []
    order: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": value, "total": total, "message": message})
        order.append("progress")

    result = await client.call_tool(name, json.loads(arguments), progress_callback=on_progress)
    order.append("result")
    return {
        "progress": progress,
        "result": dump(result),
        "order": order,
        "task": tasks.created[0] if tasks.created else None,
        "polls": tasks.polls,
    }


async def discover(url: str) -> dict[str, Any]:
    async with create_mcp_http_client() as http:
        refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        challenge = extract_resource_metadata_from_www_auth(refused)
        documents = {}
        for candidate in build_protected_resource_metadata_discovery_urls(challenge, url):
            metadata = await handle_protected_resource_response(await http.get(candidate))
            documents[candidate] = None if metadata is None else dump(metadata)
    return {"challenge": challenge, "documents": documents}


async def main(command: str, *args: str) -> dict[str, Any]:
    url = os.environ["MCP_URL"]
    if command == "discover":
        return await discover(url)
    tasks = Tasks()
    async with http_client() as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, extensions=[tasks], read_timeout_seconds=120) as client:
            if command == "list":
                return await list_tools(client)
            if command == "call":
                return await call(client, tasks, *args)
    raise ValueError(f"unknown command {command}")


if __name__ == "__main__":
    try:
        output = asyncio.run(main(*sys.argv[1:]))
    except MCPError as error:
        output = {"error": {"code": error.error.code, "message": error.error.message}}
    print(json.dumps(output))
