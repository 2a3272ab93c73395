"""ReCo inside other trainers: `reco_scaled.integrations.trl` (TRL's GRPOTrainer, requirements-trl.txt)."""
