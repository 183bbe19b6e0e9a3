package main

// Examples for the commands whose use is short enough not to need more
// help than the one line kong prints; every command gets one.

func (c *DaemonStatusCmd) Help() string {
	return "Exit code 3 when no daemon is running.\n\nExamples:\n  thrum daemon status\n  thrum daemon status --json"
}

func (c *GroupListCmd) Help() string {
	return "The everyone group's member count is the number of agents.\n\nExamples:\n  thrum group list\n  thrum group list --json"
}

func (c *GroupInfoCmd) Help() string {
	return "Examples:\n  thrum group info reviewers\n  thrum group info @everyone --json"
}

func (c *GroupMembersCmd) Help() string {
	return "Examples:\n  thrum group members reviewers\n  thrum group members @everyone --expand"
}

func (c *AgentWhoamiCmd) Help() string {
	return "Examples:\n  thrum agent whoami\n  THRUM_NAME=alice thrum agent whoami --json"
}

func (c *SessionStartCmd) Help() string {
	return "Examples:\n  thrum session start\n  thrum session start --scope module:auth --worktree ."
}

func (c *SessionEndCmd) Help() string {
	return "Examples:\n  thrum session end\n  thrum session end --reason crash --session ses_01HXE..."
}

func (c *SessionListCmd) Help() string {
	return "Examples:\n  thrum session list --active\n  thrum session list --agent alice"
}

func (c *SessionHeartbeatCmd) Help() string {
	return "With a worktree ref on the session, a heartbeat also records its git work\ncontext (branch, unmerged commits, changed files).\n\nExamples:\n  thrum session heartbeat\n  thrum session heartbeat --add-scope file:src/auth.go"
}

func (c *SessionIntentCmd) Help() string {
	return "Examples:\n  thrum session intent \"Refactoring the login flow\"\n  thrum session intent        # clears it"
}

func (c *SessionTaskCmd) Help() string {
	return "Examples:\n  thrum session task beads:thrum-42\n  thrum session task          # clears it"
}

func (c *ThreadListCmd) Help() string {
	return "Examples:\n  thrum thread list\n  thrum thread list --scope module:auth --page 2"
}

func (c *ThreadGetCmd) Help() string {
	return "Examples:\n  thrum thread get thr_01HXE...\n  thrum thread get thr_01HXE... --page-size 20 --page 2"
}

func (c *SyncForceCmd) Help() string {
	return "Starts a git round now and wakes NATS, and returns; watch it with thrum sync\nstatus. With --wait it returns once that round is done and NATS has published\nwhat was written before and read the stream as it was: the others' events\nare then in the log and the local ones sent. With NATS alone, only the NATS\npart; with neither, sync is off.\n\nExamples:\n  thrum sync force\n  thrum sync force --wait\n  thrum sync force && thrum sync status"
}

func (c *VersionCmd) Help() string { return "Examples:\n  thrum version\n  thrum version --json" }
