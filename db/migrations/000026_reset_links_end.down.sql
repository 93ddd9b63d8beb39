DROP TRIGGER users_password_change_ends_reset_links ON users;
DROP FUNCTION end_reset_links_on_password_change();
