"""The server's resources, below the lifecycle of runs: sessions and their folders (sessions), the encoders in memory
(models), the disk and CPU accounts (accounts, disk, cpu), the hub models on disk (hubcache), the kept runs (store)
and their typed record (record), and the turns and slots that share the cores (turns). Nothing here imports
explorer.runs: a run's lifecycle (explorer.runs) uses these; they know nothing of it."""
