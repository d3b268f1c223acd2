"""A run's lifecycle, and nothing else: one live `Run` per run (live), the one path every kind takes from asked to
served to done (execute), the training job in its thread (jobs), training runs (training) and runs not trained here
(saved: opened by id, uploaded zips, blends). The server's resources they use (sessions, models, accounts, disk,
CPU, turns and slots, the kept runs and their record) are explorer.resources, below them.
"""
