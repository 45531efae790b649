"""The app-API environment: a world of apps over MCP, scenario templates with native
evaluators (paper sections 4 and 5.3, appendix A.2).

Public API: :class:`AppsEnvironment` (registered as ``apps``), the templates
(:data:`TEMPLATES`, :class:`Template`, :data:`SPLITS`), an instance and its world
(:func:`instance`, :class:`Instance`, :data:`INSTANCES`), the APIs (:data:`APIS`,
:data:`APPS`, :data:`READ_TOOLS`, :data:`WRITE_TOOLS`, :data:`PAGE_LIMIT_DEFAULT`,
:data:`PAGE_LIMIT_MAX`) and the whole-database diff (:func:`diff`). The server is
:mod:`.server`; running a program against an instance for tests is :mod:`.testing`.
"""

from controlscope.envs.apps._api import PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, Api, AppError
from controlscope.envs.apps._apps import APIS, APPS, READ_TOOLS, WRITE_TOOLS
from controlscope.envs.apps._diff import RowChange, diff
from controlscope.envs.apps._template import SPLITS, Built, Split, Template, answer_matches
from controlscope.envs.apps._templates import TEMPLATES
from controlscope.envs.apps.environment import (
    APP_BUDGETS,
    INSTANCES,
    AppsEnvironment,
    Instance,
    instance,
    instance_seed,
)

__all__ = [
    "APIS",
    "APPS",
    "APP_BUDGETS",
    "INSTANCES",
    "PAGE_LIMIT_DEFAULT",
    "PAGE_LIMIT_MAX",
    "READ_TOOLS",
    "SPLITS",
    "TEMPLATES",
    "WRITE_TOOLS",
    "Api",
    "AppError",
    "AppsEnvironment",
    "Built",
    "Instance",
    "RowChange",
    "Split",
    "Template",
    "answer_matches",
    "diff",
    "instance",
    "instance_seed",
]
