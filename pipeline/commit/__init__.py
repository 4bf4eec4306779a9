"""The commit worker: turns the branch-work FIFO of each (provider, branch) into attributed Git commits.

One consumer-group member owns each branch-work partition; per branch a single FIFO collects writes
into commit windows, writes trees and commits straight into the object database (no index, no
worktree), and pushes with a compare-and-swap on the remote tip. The last applied work offset rides
in every commit's `Reverser-Offset` trailer so a restart never commits the same work twice.
"""
