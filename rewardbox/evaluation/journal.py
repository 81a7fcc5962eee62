"""Kept for users of the old path: the campaign journal now lives in ``rewardbox.episode.journal``."""

from rewardbox.episode.journal import SHARD_GLOB, CampaignJournal, campaign_journal

__all__ = ["SHARD_GLOB", "CampaignJournal", "campaign_journal"]
