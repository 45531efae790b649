"""What the apps environment tells the planner: how the APIs reach the apps, how to find the
API it needs, and one worked example."""

from __future__ import annotations

from controlscope.core import PlannerFormat

PLANNER_NOTE = (
    "The apps (contacts, mail, payments, music, notes, todo, files) are reachable ONLY through "
    "their API functions, named app__api (e.g. music__show_playlists); they all exist in the "
    "session even where not listed below. Find what you need with api_docs__show_api_descriptions"
    "(app_name=...) and api_docs__show_api_doc(app_name=..., api_name=...). Every API returns JSON "
    "text (use json.loads). An app's APIs need an access_token from that app's login, with your "
    "email and that app's password from supervisor__show_account_passwords(). Listing APIs "
    "return one page at a time (page_index from 0, page_limit up to 20, 5 by default): keep "
    "asking for the next page until a page comes back short. When the task is done, call "
    "supervisor__complete_task, with answer=... when the task asks a question."
)
"""The system prompt's note on how the tools reach the environment."""

PROMPT_APPS = ("api_docs", "supervisor")
"""The apps whose APIs the planner's prompt lists; the others are found through the
documentation APIs (agents cannot hold every API's schema in a prompt, paper A.2)."""


def planner_example(fmt: PlannerFormat) -> str:
    """A worked example: looking an API up, signing in, paging, answering."""

    def block(code: str) -> str:
        if fmt == "tools":
            return f"[calls execute_python with code:]\n{code}"
        return f"```python\n{code}\n```"

    first = (
        "import json\n"
        'print(api_docs__show_api_descriptions(app_name="notes"))\n'
        'print(api_docs__show_api_doc(app_name="notes", api_name="search_notes"))'
    )
    second = (
        "me = json.loads(supervisor__show_profile())['email']\n"
        "passwords = {p['account_name']: p['password'] for p in "
        "json.loads(supervisor__show_account_passwords())}\n"
        "token = json.loads(notes__login(username=me, password=passwords['notes']))"
        "['access_token']\n"
        "notes, page = [], 0\n"
        "while True:\n"
        "    found = json.loads(notes__search_notes(access_token=token, tag='travel', "
        "page_index=page, page_limit=20))\n"
        "    notes += found\n"
        "    if len(found) < 20:\n"
        "        break\n"
        "    page += 1\n"
        "supervisor__complete_task(answer=len(notes))\n"
        "print(len(notes))"
    )
    return (
        "\nExample.\nTask: How many of my notes carry the tag 'travel'?\n"
        f"Assistant:\n{block(first)}\n"
        'Output: [{"name": "login", ...}, {"name": "search_notes", ...}]\n'
        '{"app_name": "notes", "api_name": "search_notes", "parameters": [...]}\n'
        f"Assistant:\n{block(second)}\nOutput: 9\n"
        "Assistant: You have 9 notes tagged 'travel'.\n"
    )
