"""Tests of the repository's tools/ scripts and their helper packages."""
