"""The course layer: profiles, headline figures, exercise checks, lab generation and running."""

from llmlab.course.headline import headline
from llmlab.course.profiles import PROFILES, Profile, profile

__all__ = ["PROFILES", "Profile", "headline", "profile"]
