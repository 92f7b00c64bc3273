package detect

import "regexp"

var destructiveRules = prepare([]rule{
	{kind: "recursive_delete", description: "recursive forced delete of a root, home or wildcard path",
		re: regexp.MustCompile(`\brm\s+(?:-[a-zA-Z]*[rR][a-zA-Z]*\s+|--recursive\s+)(?:-[a-zA-Z]+\s+|--[a-z-]+\s+)*(?:/|~|\*|/\*|\$HOME|\.\.?)(?:\s|"|'|;|$)`)},
	{kind: "python_tree_delete", description: "deletes a directory tree from code",
		re: regexp.MustCompile(`\bshutil\.rmtree\s*\(|\bos\.removedirs\s*\(`)},
	{kind: "disk_wipe", description: "formats or overwrites a disk",
		re: regexp.MustCompile(`\bmkfs(?:\.\w+)?\s|\bdd\s+[^|;&\n]*\bof=/dev/|>\s*/dev/(?:sd[a-z]|nvme\d|hd[a-z])|\bwipefs\b|\bshred\s`)},
	{kind: "permission_wipe", description: "opens every permission on a tree",
		re: regexp.MustCompile(`\bchmod\s+-R\s+0?777\s+/|\bchown\s+-R\s+\S+\s+/(?:\s|$)`)},
	{kind: "fork_bomb", description: "fork bomb",
		re: regexp.MustCompile(`:\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:`)},
	{kind: "sql_destroy", description: "drops or truncates a table or database, or deletes without a WHERE",
		re: regexp.MustCompile(`(?i)\bdrop\s+(?:table|database|schema)\b|\btruncate\s+(?:table\s+)?\w+|\bdelete\s+from\s+\w+\s*(?:;|$|")`)},
	{kind: "git_history_rewrite", description: "forced push or hard reset that destroys history",
		re: regexp.MustCompile(`\bgit\s+push\s+(?:[^\n;&|]*\s)?(?:-f|--force)\b|\bgit\s+reset\s+--hard\b|\bgit\s+clean\s+-[a-z]*f[a-z]*d`)},
	{kind: "kill_all", description: "kills every process or shuts the machine down",
		re: regexp.MustCompile(`\bkill\s+-9\s+-1\b|\bkillall5\b|\b(?:shutdown|poweroff|halt|reboot)\b(?:\s+-[a-z]+)*\s*(?:now|-h|$)`)},
})

// Destructive finds commands and code that destroy data or machines:
// recursive deletes of roots, disk wipes, permission wipes, fork bombs,
// dropped tables, history rewrites, mass kills.
func Destructive(text string) []Finding { return scan(text, destructiveRules) }

var credentialPathRules = prepare([]rule{
	{kind: "credential_store", description: "path of a credential store",
		re: regexp.MustCompile(`(?:~|\$HOME|/home/[^/\s"']+|/root)?/?\.(?:aws/credentials|ssh/id_(?:rsa|dsa|ecdsa|ed25519)\b|netrc\b|docker/config\.json|kube/config\b|git-credentials\b|pgpass\b|npmrc\b|pypirc\b|config/gcloud/(?:credentials|application_default_credentials)\S*)|/etc/shadow\b|/etc/sudoers\b`)},
})

// CredentialPaths finds paths of credential stores (~/.aws/credentials,
// SSH private keys, .netrc, docker and kube configs, /etc/shadow, …).
func CredentialPaths(text string) []Finding { return scan(text, credentialPathRules) }
