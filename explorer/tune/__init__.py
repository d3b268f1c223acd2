"""Before a run: the strings loaded (loading), checked inputs and settings (inputs), the plan and its time estimate
(planning, estimate).
"""
