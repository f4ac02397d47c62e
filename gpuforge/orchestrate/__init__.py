"""Orchestration: apply, plan, rollout batches and the applied-state record.

The only room that runs deploys against hosts (through ``gpuforge.deploy.run``); it decides
what changes, in which batches, and records what was applied.
"""
