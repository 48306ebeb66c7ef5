"""The generation number of what a tool call's decision reads (servers/decisions.py), bumped by the
database itself on every change to those tables, whoever makes it."""

from django.db import migrations

# As in servers/decisions.py when this was written (a migration keeps its own copy).
GENERATION_TABLE = "servers_generation"
WATCHED_TABLES = (
    "servers_team",
    "servers_membership",
    "servers_server",
    "servers_teampolicy",
    "servers_permissionrule",
)


def create(apps, schema_editor):
    run = schema_editor.execute
    run(f"CREATE TABLE {GENERATION_TABLE} (id integer PRIMARY KEY, number bigint NOT NULL)")
    run(f"INSERT INTO {GENERATION_TABLE} (id, number) VALUES (1, 1)")
    bump = f"UPDATE {GENERATION_TABLE} SET number = number + 1 WHERE id = 1"
    if schema_editor.connection.vendor == "postgresql":
        # Once per statement (a flush's TRUNCATE too): the row is locked only until the change commits.
        run(f"CREATE FUNCTION {GENERATION_TABLE}_bump() RETURNS trigger AS $$ BEGIN {bump}; RETURN NULL; END; $$ LANGUAGE plpgsql")
        for table in WATCHED_TABLES:
            run(
                f"CREATE TRIGGER {table}_generation AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {GENERATION_TABLE}_bump()"
            )
    else:
        for table in WATCHED_TABLES:
            for event in ("INSERT", "UPDATE", "DELETE"):
                run(f"CREATE TRIGGER {table}_generation_{event.lower()} AFTER {event} ON {table} BEGIN {bump}; END")


def drop(apps, schema_editor):
    run = schema_editor.execute
    if schema_editor.connection.vendor == "postgresql":
        for table in WATCHED_TABLES:
            run(f"DROP TRIGGER IF EXISTS {table}_generation ON {table}")
        run(f"DROP FUNCTION IF EXISTS {GENERATION_TABLE}_bump()")
    else:
        for table in WATCHED_TABLES:
            for event in ("insert", "update", "delete"):
                run(f"DROP TRIGGER IF EXISTS {table}_generation_{event}")
    run(f"DROP TABLE IF EXISTS {GENERATION_TABLE}")


class Migration(migrations.Migration):
    dependencies = [("servers", "0011_invitations_and_auditor_role")]

    operations = [migrations.RunPython(create, drop)]
