-- A password change of any kind (a reset link, the settings page, the
-- portal's CLI, an operator, a hand-written UPDATE) ends every reset link of
-- the user not yet used: a link made before the change must not undo it.
-- Used links stay as the record of the reset they made.
CREATE FUNCTION end_reset_links_on_password_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM password_resets WHERE user_id = NEW.id AND used_at IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER users_password_change_ends_reset_links
AFTER UPDATE OF password_hash ON users
FOR EACH ROW WHEN (OLD.password_hash IS DISTINCT FROM NEW.password_hash)
EXECUTE FUNCTION end_reset_links_on_password_change();

-- Links open at once before this migration: keep only each user's newest.
DELETE FROM password_resets r
WHERE used_at IS NULL
  AND EXISTS (SELECT 1 FROM password_resets n
              WHERE n.user_id = r.user_id AND n.used_at IS NULL AND n.created_at > r.created_at);
