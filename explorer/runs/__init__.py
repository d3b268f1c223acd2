"""Runs: sessions and their folders, kept runs (store), the training thread (jobs), runs started, followed and
served (training), runs not trained here (saved: opened by id, uploaded zips, blends), encoders in memory (models).
"""
