"""Databases beside MetaSchedule's JSONDatabase: zero-measurement schedules (``predicted``) and the schedule a task
shares with its variants at compile time (``shared_schedules``)."""
