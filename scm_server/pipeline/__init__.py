"""Pipelines: replicated PipelineStateManager, leader-side PipelineManager, placement, creator."""
