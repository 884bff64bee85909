-- Every change to what a turn reads before it runs notifies
-- `toolserver_turn_config`, so every server process drops what it cached
-- before its next turn: an update or delete of an agent (`agent <account>
-- <id>`), and any change to an account's policies (`policies <account>`)
-- or to one of its scoped policies (`scoped_policies <account>`). Inserts
-- count for policies because a process caches that an account has none.
-- Deletes that cascade from an account count too. Changes to tools notify
-- `toolserver_tools` (0018).

CREATE FUNCTION toolserver_notify_agent_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('toolserver_turn_config', 'agent ' || OLD.account_id || ' ' || OLD.id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER agents_changed
    AFTER UPDATE OR DELETE ON agents
    FOR EACH ROW EXECUTE FUNCTION toolserver_notify_agent_changed();

-- TG_ARGV[0] names what changed: `policies` or `scoped_policies`.
CREATE FUNCTION toolserver_notify_policies_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    account TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        account := OLD.account_id;
    ELSE
        account := NEW.account_id;
    END IF;
    PERFORM pg_notify('toolserver_turn_config', TG_ARGV[0] || ' ' || account);
    RETURN NULL;
END;
$$;

CREATE TRIGGER account_policies_changed
    AFTER INSERT OR UPDATE OR DELETE ON account_policies
    FOR EACH ROW EXECUTE FUNCTION toolserver_notify_policies_changed('policies');

CREATE TRIGGER scoped_policies_changed
    AFTER INSERT OR UPDATE OR DELETE ON scoped_policies
    FOR EACH ROW EXECUTE FUNCTION toolserver_notify_policies_changed('scoped_policies');
