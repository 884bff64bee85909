-- Every change to a stored tool (an update, a delete, a delete that cascades
-- from its account) notifies `toolserver_tools` with the tool's id, so every
-- server process drops what it cached of that tool before its next call.

CREATE FUNCTION toolserver_notify_tool_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('toolserver_tools', OLD.id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER tools_changed
    AFTER UPDATE OR DELETE ON tools
    FOR EACH ROW EXECUTE FUNCTION toolserver_notify_tool_changed();
