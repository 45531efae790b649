"""The music app (a song catalogue, your library, liked songs, playlists) and the
documentation APIs that describe every app."""

from __future__ import annotations

from typing import Any

from controlscope.envs.apps._api import (
    APIS,
    APPS,
    AppError,
    Param,
    Session,
    api,
    app,
    paging,
    tool_name,
)
from controlscope.envs.apps._people import register_login

__all__: list[str] = []

app("music", "Music: a catalogue of songs, your library, the songs you like, your playlists.")
register_login("music")

_SONG = "s.song_id, s.title, s.artist, s.album, s.genre, s.duration_s, s.release_year, s.play_count"
_SONG_ID = Param("song_id", "integer", "the song's id")


@api(
    "music",
    "search_songs",
    "Search the catalogue (every song, not only yours), ordered by song id; the query matches "
    "titles, artists and albums.",
    [
        Param("query", "string", "text to look for", required=False, default=""),
        Param("genre", "string", "only this genre", required=False),
        Param("artist", "string", "only this artist (exact name)", required=False),
    ],
    returns="a list of {song_id, title, artist, album, genre, duration_s, release_year, "
    "play_count}",
    paged=True,
)
def _search_songs(
    s: Session,
    query: str = "",
    genre: str | None = None,
    artist: str | None = None,
    page_index: int = 0,
    page_limit: int = 5,
) -> Any:
    size, offset = paging(page_index, page_limit)
    like = query.lower()  # a substring, not a LIKE pattern
    return s.rows(
        f"SELECT {_SONG} FROM music_songs s WHERE (instr(lower(s.title), ?) OR "
        "instr(lower(s.artist), ?) OR instr(lower(s.album), ?)) AND (? IS NULL OR s.genre = ?) AND "
        "(? IS NULL OR s.artist = ?) ORDER BY s.song_id LIMIT ? OFFSET ?",
        (like, like, like, genre, genre, artist, artist, size, offset),
    )


@api(
    "music",
    "show_song",
    "Show one song.",
    [_SONG_ID],
    returns="{song_id, title, artist, album, genre, duration_s, release_year, play_count}",
)
def _show_song(s: Session, song_id: int) -> dict[str, Any]:
    return s.row(
        f"SELECT {_SONG} FROM music_songs s WHERE s.song_id = ?", (song_id,), f"song {song_id}"
    )


def _listed(s: Session, table: str, stamp: str, index: int, limit: int) -> Any:
    size, offset = paging(index, limit)
    return s.rows(
        f"SELECT {_SONG}, x.{stamp} FROM {table} x JOIN music_songs s ON s.song_id = x.song_id "
        f"WHERE x.owner_email = ? ORDER BY x.{stamp} DESC, s.song_id LIMIT ? OFFSET ?",
        (s.user, size, offset),
    )


@api(
    "music",
    "show_library",
    "List the songs in your library, most recently added first.",
    returns="a list of songs with added_at",
    paged=True,
)
def _show_library(s: Session, page_index: int = 0, page_limit: int = 5) -> Any:
    return _listed(s, "music_library", "added_at", page_index, page_limit)


@api(
    "music",
    "show_liked_songs",
    "List the songs you like, most recently liked first.",
    returns="a list of songs with liked_at",
    paged=True,
)
def _show_liked(s: Session, page_index: int = 0, page_limit: int = 5) -> Any:
    return _listed(s, "music_likes", "liked_at", page_index, page_limit)


def _toggle(s: Session, table: str, stamp: str, song_id: int, add: bool, what: str) -> Any:
    _show_song(s, song_id)
    there = s.db.execute(
        f"SELECT 1 FROM {table} WHERE owner_email = ? AND song_id = ?", (s.user, song_id)
    ).fetchone()
    if add and there:
        raise AppError(409, f"song {song_id} is already {what}")
    if not add and not there:
        raise AppError(404, f"song {song_id} is not {what}")
    if add:
        s.write(
            f"INSERT INTO {table} (owner_email, song_id, {stamp}) VALUES (?, ?, ?)",
            (s.user, song_id, s.now),
        )
    else:
        s.write(f"DELETE FROM {table} WHERE owner_email = ? AND song_id = ?", (s.user, song_id))
    return {"message": f"song {song_id} {'is now' if add else 'is no longer'} {what}"}


@api(
    "music",
    "add_to_library",
    "Add a song to your library.",
    [_SONG_ID],
    returns="{message}",
    writes=True,
)
def _add_library(s: Session, song_id: int) -> Any:
    return _toggle(s, "music_library", "added_at", song_id, True, "in your library")


@api(
    "music",
    "remove_from_library",
    "Remove a song from your library.",
    [_SONG_ID],
    returns="{message}",
    writes=True,
)
def _remove_library(s: Session, song_id: int) -> Any:
    return _toggle(s, "music_library", "added_at", song_id, False, "in your library")


@api("music", "like_song", "Like a song.", [_SONG_ID], returns="{message}", writes=True)
def _like(s: Session, song_id: int) -> Any:
    return _toggle(s, "music_likes", "liked_at", song_id, True, "liked")


@api("music", "unlike_song", "Stop liking a song.", [_SONG_ID], returns="{message}", writes=True)
def _unlike(s: Session, song_id: int) -> Any:
    return _toggle(s, "music_likes", "liked_at", song_id, False, "liked")


@api(
    "music",
    "show_playlists",
    "List your playlists by title.",
    returns="a list of {playlist_id, title, is_public, songs (their number), created_at}",
    paged=True,
)
def _show_playlists(s: Session, page_index: int = 0, page_limit: int = 5) -> Any:
    size, offset = paging(page_index, page_limit)
    rows = s.rows(
        "SELECT p.playlist_id, p.title, p.is_public, (SELECT count(*) FROM music_playlist_songs "
        "x WHERE x.playlist_id = p.playlist_id) AS songs, p.created_at FROM music_playlists p "
        "WHERE p.owner_email = ? ORDER BY p.title, p.playlist_id LIMIT ? OFFSET ?",
        (s.user, size, offset),
    )
    return [{**r, "is_public": bool(r["is_public"])} for r in rows]


def _playlist(s: Session, playlist_id: int) -> dict[str, Any]:
    return s.row(
        "SELECT * FROM music_playlists WHERE playlist_id = ? AND owner_email = ?",
        (playlist_id, s.user),
        f"playlist {playlist_id}",
    )


@api(
    "music",
    "show_playlist",
    "Show one of your playlists with all its songs in order.",
    [Param("playlist_id", "integer", "the playlist's id")],
    returns="{playlist_id, title, is_public, created_at, songs: [{song_id, title, artist, "
    "duration_s, position}]}",
)
def _show_playlist(s: Session, playlist_id: int) -> dict[str, Any]:
    found = _playlist(s, playlist_id)
    songs = s.rows(
        "SELECT s.song_id, s.title, s.artist, s.duration_s, x.position FROM music_playlist_songs"
        " x JOIN music_songs s ON s.song_id = x.song_id WHERE x.playlist_id = ? "
        "ORDER BY x.position",
        (playlist_id,),
    )
    return {
        **{k: found[k] for k in ("playlist_id", "title", "created_at")},
        "is_public": bool(found["is_public"]),
        "songs": songs,
    }


@api(
    "music",
    "create_playlist",
    "Create an empty playlist.",
    [
        Param("title", "string", "its title"),
        Param("is_public", "boolean", "whether others can see it", required=False, default=False),
    ],
    returns="{playlist_id}",
    writes=True,
)
def _create_playlist(s: Session, title: str, is_public: bool = False) -> dict[str, int]:
    if not title.strip():
        raise AppError(422, "a playlist needs a title")
    new = s.write(
        "INSERT INTO music_playlists (owner_email, title, is_public, created_at) "
        "VALUES (?, ?, ?, ?)",
        (s.user, title, int(is_public), s.now),
    )
    return {"playlist_id": new}


@api(
    "music",
    "add_song_to_playlist",
    "Add a song at the end of one of your playlists.",
    [Param("playlist_id", "integer", "the playlist's id"), _SONG_ID],
    returns="{message}",
    writes=True,
)
def _add_to_playlist(s: Session, playlist_id: int, song_id: int) -> dict[str, str]:
    _playlist(s, playlist_id)
    _show_song(s, song_id)
    if s.db.execute(
        "SELECT 1 FROM music_playlist_songs WHERE playlist_id = ? AND song_id = ?",
        (playlist_id, song_id),
    ).fetchone():
        raise AppError(409, f"song {song_id} is already in playlist {playlist_id}")
    last = s.one(
        "SELECT coalesce(max(position), 0) FROM music_playlist_songs WHERE playlist_id = ?",
        (playlist_id,),
    )[0]
    s.write(
        "INSERT INTO music_playlist_songs (playlist_id, song_id, position) VALUES (?, ?, ?)",
        (playlist_id, song_id, int(last) + 1),
    )
    return {"message": f"song {song_id} added to playlist {playlist_id}"}


@api(
    "music",
    "remove_song_from_playlist",
    "Remove a song from one of your playlists.",
    [Param("playlist_id", "integer", "the playlist's id"), _SONG_ID],
    returns="{message}",
    writes=True,
)
def _remove_from_playlist(s: Session, playlist_id: int, song_id: int) -> dict[str, str]:
    _playlist(s, playlist_id)
    cursor = s.db.execute(
        "DELETE FROM music_playlist_songs WHERE playlist_id = ? AND song_id = ?",
        (playlist_id, song_id),
    )
    if cursor.rowcount == 0:
        raise AppError(404, f"song {song_id} is not in playlist {playlist_id}")
    return {"message": f"song {song_id} removed from playlist {playlist_id}"}


@api(
    "music",
    "delete_playlist",
    "Delete one of your playlists.",
    [Param("playlist_id", "integer", "the playlist's id")],
    returns="{message}",
    writes=True,
)
def _delete_playlist(s: Session, playlist_id: int) -> dict[str, str]:
    _playlist(s, playlist_id)
    s.write("DELETE FROM music_playlist_songs WHERE playlist_id = ?", (playlist_id,))
    s.write("DELETE FROM music_playlists WHERE playlist_id = ?", (playlist_id,))
    return {"message": f"playlist {playlist_id} deleted"}


# --- documentation --------------------------------------------------------------------------

app("api_docs", "Documentation of every app and API: start here to find the API you need.")


@api(
    "api_docs",
    "show_app_descriptions",
    "List the apps with a short description each.",
    returns="a list of {name, description}",
    token=False,
)
def _app_descriptions(s: Session) -> list[dict[str, str]]:
    return [{"name": name, "description": text} for name, text in APPS.items()]


def _known_app(app_name: str) -> None:
    if app_name not in APPS:
        raise AppError(404, f"there is no app {app_name!r}; apps: {', '.join(APPS)}")


@api(
    "api_docs",
    "show_api_descriptions",
    "List an app's APIs with a short description each.",
    [Param("app_name", "string", "the app's name")],
    returns="a list of {name, function, description}",
    token=False,
)
def _api_descriptions(s: Session, app_name: str) -> list[dict[str, str]]:
    _known_app(app_name)
    return [
        {"name": a.name, "function": a.tool, "description": a.description}
        for a in APIS.values()
        if a.app == app_name
    ]


@api(
    "api_docs",
    "show_api_doc",
    "Show one API's full specification: its parameters "
    "(types, defaults, constraints) and what it returns.",
    [Param("app_name", "string", "the app's name"), Param("api_name", "string", "the API's name")],
    returns="{app_name, api_name, function, description, parameters, returns, changes_state}",
    token=False,
)
def _api_doc(s: Session, app_name: str, api_name: str) -> dict[str, Any]:
    _known_app(app_name)
    found = APIS.get(tool_name(app_name, api_name))
    if found is None:
        raise AppError(404, f"{app_name} has no API {api_name!r}")
    return found.doc()
