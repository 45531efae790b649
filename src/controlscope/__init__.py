"""controlscope: workflow revision scopes for code-writing language-model agents."""

__version__ = "0.1.0"
