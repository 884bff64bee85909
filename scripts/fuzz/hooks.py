"""Schemathesis hooks of the API fuzzer."""

import re

import schemathesis

TOOL_ID = re.compile(r"^tool_[0-9A-Fa-f]{32}$")


def _names_uploaded_tool(body):
    config = body.get("config") if isinstance(body, dict) else None
    tools = config.get("tools") if isinstance(config, dict) else None
    return isinstance(tools, dict) and any(TOOL_ID.match(key) for key in tools)


def _names_oauth_provider(body):
    config = body.get("config") if isinstance(body, dict) else None
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict):
        return False
    return any(
        isinstance(server, dict)
        and isinstance(server.get("auth"), dict)
        and server["auth"].get("type") == "connection"
        for server in servers.values()
    )


def _has_policies(body):
    # Any text at all: Python's idea of white space (`str.strip`) takes in
    # control characters such as U+001D that Cedar refuses as tokens.
    config = body.get("config") if isinstance(body, dict) else None
    policies = config.get("policies") if isinstance(config, dict) else None
    return isinstance(policies, str) and policies != ""


def _empty_bundle_part(body):
    return isinstance(body, dict) and body.get("bundle") in (b"", "")


@schemathesis.hook
def filter_body(context, body):
    """Leaves out bodies refused for reasons the fuzzer cannot honour from
    the schema: an agent config naming a random `toolId` names no tool of
    the account, one whose MCP server acts through a random OAuth
    `provider` names no provider of the account, and its random `policies`
    text is no Cedar that validates against the account's tools (rules of
    state); an empty multipart
    `bundle` part is refused (the schema says "not empty", but the fuzzer
    validates binary parts as empty strings, so `minLength` on them
    misleads it)."""
    if context.operation is None:
        return True
    if context.operation.path.startswith("/agents"):
        return not (
            _names_uploaded_tool(body) or _names_oauth_provider(body) or _has_policies(body)
        )
    if context.operation.path.startswith("/accounts/me/tools"):
        return not _empty_bundle_part(body)
    return True


def _tolerate_unparsable_sources():
    """CPython 3.11 before 3.11.8 can fail to parse a large source file
    ("AST constructor recursion depth mismatch", gh-106905) when Hypothesis
    reads a lambda's source only to name it in reports; the name is
    cosmetic, so such a lambda is called "lambda" instead."""
    from hypothesis.internal import lambda_sources

    describe = lambda_sources.lambda_description

    def lambda_description(f):
        try:
            return describe(f)
        except SystemError:
            return "lambda"

    lambda_sources.lambda_description = lambda_description


_tolerate_unparsable_sources()


def _message_validator():
    import pathlib

    import jsonschema_rs
    import yaml

    document = yaml.safe_load((pathlib.Path(__file__).parents[2] / "openapi.yaml").read_text())
    root = {"components": document["components"], "$ref": "#/components/schemas/UiMessage"}
    return jsonschema_rs.validator_for(root)


_MESSAGE = _message_validator()
_TURN_PATHS = ("/agents/{agentId}/chat", "/agents/{agentId}/async")


@schemathesis.hook
def map_body(context, body):
    """Turn requests whose messages are valid UI messages but do not fit a
    new conversation (the fuzzer cannot know what is stored) get one user
    message instead, still valid by the schema, so that turns run and the
    links from them (to the conversation, to the detached turn) are
    followed. Bodies breaking the schema anywhere are left as they are."""
    if context.operation is None or context.operation.path not in _TURN_PATHS:
        return body
    if not isinstance(body, dict) or body.get("trigger") != "submit-message":
        return body
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(_MESSAGE.is_valid(m) for m in messages):
        return body
    return {**body, "messages": [{"id": "fuzz-user", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]}
