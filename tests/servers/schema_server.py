"""An MCP server whose tools exercise JSON Schema in the playground's forms, one tool per case.

Every tool answers with exactly the arguments it received, as JSON text and as structured content,
so a browser test can fill a form, call the tool and compare what arrived with what it meant to send.
Most tools declare their inputSchema by hand (the cases Pydantic never writes: a root `oneOf`,
`definitions`, a cycle, `allOf`, every constraint); `place_order` is built by the SDK from Pydantic
type hints, so its nested models land in `$defs` behind `$ref`s, as in most Python servers.

Run it over stdio: `python -m tests.servers.schema_server`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
from pydantic import BaseModel, Field

ADDRESS = {
    "type": "object",
    "title": "Address",
    "properties": {
        "street": {"type": "string", "title": "Street"},
        "city": {"type": "string", "title": "City"},
    },
    "required": ["street"],
}

SCHEMAS: dict[str, dict[str, Any]] = {
    # Local references, through both `$defs` and the older `definitions`.
    "refs": {
        "type": "object",
        "properties": {
            "home": {"$ref": "#/$defs/Address", "title": "Home"},
            "work": {"$ref": "#/definitions/Place"},
        },
        "required": ["home"],
        "$defs": {"Address": ADDRESS},
        "definitions": {"Place": {**ADDRESS, "title": "Work"}},
    },
    # A model that contains itself: the form stops at the cycle and asks for JSON there.
    "cycle": {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node", "title": "Tree"}},
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "title": "Label"},
                    "next": {"$ref": "#/$defs/Node", "title": "Next"},
                },
            }
        },
    },
    # The whole argument object is one of two shapes (MCP wants `type: object` at the root all the same).
    "lookup": {
        "type": "object",
        "oneOf": [
            {
                "title": "By name",
                "type": "object",
                "properties": {"name": {"type": "string", "title": "Name", "minLength": 2}},
                "required": ["name"],
                "additionalProperties": False,
            },
            {
                "title": "By id",
                "type": "object",
                "properties": {"id": {"type": "integer", "title": "Id", "minimum": 1}},
                "required": ["id"],
                "additionalProperties": False,
            },
        ],
    },
    # Variants inside properties: by a discriminator's const, by const, and a nullable string.
    "draw": {
        "type": "object",
        "properties": {
            "shape": {
                "title": "Shape",
                "oneOf": [
                    {
                        "type": "object",
                        "properties": {
                            "kind": {"const": "circle"},
                            "radius": {"type": "number", "title": "Radius", "exclusiveMinimum": 0},
                        },
                        "required": ["kind", "radius"],
                    },
                    {
                        "type": "object",
                        "properties": {
                            "kind": {"const": "square"},
                            "side": {"type": "integer", "title": "Side", "minimum": 1},
                        },
                        "required": ["kind", "side"],
                    },
                ],
            },
            "size": {
                "title": "Size",
                "anyOf": [
                    {"const": "auto", "title": "Automatic"},
                    {"type": "integer", "title": "Pixels", "minimum": 1},
                ],
            },
            "note": {"title": "Note", "anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
        },
        "required": ["shape"],
    },
    # Every way of saying "or null".
    "nullables": {
        "type": "object",
        "properties": {
            "nickname": {"type": ["string", "null"], "title": "Nickname"},
            "age": {"anyOf": [{"type": "integer"}, {"type": "null"}], "title": "Age"},
            "motto": {"type": ["string", "null"], "title": "Motto"},
        },
        "required": ["nickname"],
    },
    # Two halves of one object, merged into one form.
    "merged": {
        "type": "object",
        "allOf": [
            {"type": "object", "properties": {"title": {"type": "string", "title": "Title"}}, "required": ["title"]},
            {"properties": {"pages": {"type": "integer", "title": "Pages", "minimum": 1}}, "required": ["pages"]},
        ],
    },
    # One field per constraint.
    "constraints": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 2, "maxLength": 5},
            "code": {"type": "string", "title": "Code", "pattern": "^[A-Z]{3}$"},
            "count": {"type": "integer", "title": "Count", "minimum": 1, "maximum": 10},
            "ratio": {"type": "number", "title": "Ratio", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "step": {"type": "integer", "title": "Step", "multipleOf": 5},
            "email": {"type": "string", "title": "Email", "format": "email"},
            "tags": {
                "type": "array",
                "title": "Tags",
                "items": {"type": "string", "title": "Tag"},
                "minItems": 1,
                "maxItems": 2,
            },
            "colour": {"type": "string", "title": "Colour", "enum": ["red", "green", "blue"]},
        },
    },
    # An array of objects, items added and removed.
    "lines": {
        "type": "object",
        "properties": {
            "lines": {
                "type": "array",
                "title": "Lines",
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "title": "SKU"},
                        "quantity": {"type": "integer", "title": "Quantity", "minimum": 1},
                    },
                    "required": ["sku"],
                },
            }
        },
    },
    # What a form cannot hold: a free-form map and a tuple, each kept as JSON.
    "free_form": {
        "type": "object",
        "properties": {
            "counts": {"type": "object", "title": "Counts", "additionalProperties": {"type": "integer"}},
            "pair": {"type": "array", "title": "Pair", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
        },
    },
}


# Read-only, so the portal's default policy runs them without asking for approval.
READ_ONLY = ToolAnnotations(read_only_hint=True)


class SchemaServer(MCPServer):
    """The hand-written schemas are listed beside the SDK's tools and answered without the SDK's models."""

    async def list_tools(self) -> list[Tool]:
        own = [
            Tool(
                name=name,
                description=f"Answers with the arguments it received ({name}).",
                input_schema=schema,
                annotations=READ_ONLY,
            )
            for name, schema in SCHEMAS.items()
        ]
        return [*own, *await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        if name in SCHEMAS:
            return received(arguments)
        # The SDK's tools check the arguments against their models (raising if they do not fit);
        # the answer is still the arguments as they arrived, not the models' dump with defaults.
        result = await super().call_tool(name, arguments, context)
        return result if getattr(result, "is_error", False) else received(arguments)


def received(arguments: Any) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(arguments, sort_keys=True))],
        structured_content={"received": arguments},
    )


server = SchemaServer(name="schema-cases", version="1.0.0")


class Address(BaseModel):
    street: str
    city: str = Field(default="", max_length=40)


class Customer(BaseModel):
    name: str = Field(min_length=1)
    email: str = Field(json_schema_extra={"format": "email"})
    address: Address


class Item(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]+-\d+$")
    quantity: int = Field(ge=1, le=99)


class Cat(BaseModel):
    kind: Literal["cat"]
    indoor: bool = True


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


@server.tool(
    title="Place an order",
    description="Answers with the arguments it received (Pydantic models).",
    structured_output=False,
    annotations=READ_ONLY,
)
def place_order(
    customer: Customer,
    items: list[Item],
    pet: Annotated[Cat | Dog, Field(discriminator="kind")],
    gift_note: str | None = None,
) -> str:
    return "accepted"


if __name__ == "__main__":
    server.run("stdio")
