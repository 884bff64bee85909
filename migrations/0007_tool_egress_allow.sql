-- A tool's egress allow list: the host patterns its code may reach.
-- NULL: any public host.
ALTER TABLE tools ADD COLUMN egress_allow text[];
