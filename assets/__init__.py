"""Dagster assets: one module per stage, thin bodies over engine functions."""
