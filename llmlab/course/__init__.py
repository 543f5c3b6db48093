"""The course layer: profiles, headline figures, exercise checks, lab generation and running."""

from llmlab.course.artifacts import artifacts_dir
from llmlab.course.headline import headline
from llmlab.course.profiles import PROFILES, Profile, profile

__all__ = ["PROFILES", "Profile", "artifacts_dir", "headline", "profile"]
