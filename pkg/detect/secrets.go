package detect

import "regexp"

var secretRules = prepare([]rule{
	{kind: "private_key", description: "private key block",
		re: regexp.MustCompile(`-----BEGIN (?:RSA |EC |DSA |OPENSSH |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----`)},
	{kind: "aws_access_key", description: "AWS access key id",
		re: regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[0-9A-Z]{16}\b`)},
	{kind: "github_token", description: "GitHub token",
		re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b`)},
	{kind: "slack_token", description: "Slack token",
		re: regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`)},
	{kind: "azure_account_key", description: "Azure storage account key",
		re: regexp.MustCompile(`AccountKey=([A-Za-z0-9+/]{86}==)`), group: 1},
	{kind: "jwt", description: "JSON web token",
		re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)},
	{kind: "generic_secret", description: "high-entropy value assigned to a key, token, secret or password",
		re:    regexp.MustCompile(`(?i)\b[a-z0-9_.-]*(?:api[_-]?key|secret|token|passw(?:or)?d|pwd|access[_-]?key)[a-z0-9_.-]*["']?\s*[:=]\s*["']?([A-Za-z0-9+/_.~=-]{12,})`),
		group: 1, valid: func(v string) bool { return entropy(v) >= 3.5 }},
})

// Secrets finds private-key blocks, AWS access keys, GitHub and Slack tokens,
// Azure account keys, JWTs, and high-entropy values assigned to key, token,
// secret or password names.
func Secrets(text string) []Finding { return scan(text, secretRules) }
