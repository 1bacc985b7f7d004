"""``local-registry up --basic-auth USER``: the password never comes from the command line."""

from __future__ import annotations

import pytest

from devtools.errors import LocalRegistryError
from devtools.local_registry import PASSWORD_ENV, parse_basic_auth


def test_a_password_on_the_command_line_is_refused_without_being_shown() -> None:
    with pytest.raises(LocalRegistryError, match="takes the user only") as raised:
        parse_basic_auth("svc:hunter2-secret", "from-env")
    assert "hunter2-secret" not in str(raised.value)
    assert PASSWORD_ENV in str(raised.value)


def test_a_user_without_a_password_names_where_the_password_comes_from() -> None:
    with pytest.raises(LocalRegistryError, match=f"needs a password: set \\${PASSWORD_ENV} or pipe it on stdin"):
        parse_basic_auth("svc", None)


def test_a_password_with_a_character_the_properties_file_would_need_escaped_is_refused_unshown() -> None:
    with pytest.raises(LocalRegistryError, match="not shown") as raised:
        parse_basic_auth("svc", "pa=ss")
    assert "pa=ss" not in str(raised.value)
    assert parse_basic_auth("svc", "Pa-ss_1") == ("svc", "Pa-ss_1")
