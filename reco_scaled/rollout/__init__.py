from reco_scaled.rollout.base import Rollout, RolloutEngine

__all__ = ["Rollout", "RolloutEngine"]
