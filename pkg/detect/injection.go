package detect

import "regexp"

var injectionRules = prepare([]rule{
	{kind: "override", description: "tries to override prior instructions",
		re: regexp.MustCompile(`(?i)\b(?:ignore|disregard|forget|override|skip)\s+(?:all\s+|any\s+|the\s+|your\s+|my\s+)*(?:previous|prior|above|earlier|preceding|original|system)\s+(?:instructions|prompts?|rules|directions|guidelines|messages)`)},
	{kind: "role_hijack", description: "tries to give the model a new role or system prompt",
		re: regexp.MustCompile(`(?i)(?:\byou\s+are\s+now\s+(?:a|an|the|in|DAN)\b|\bact\s+as\s+(?:an?\s+)?(?:unrestricted|jailbroken|DAN|developer\s+mode)|\bdeveloper\s+mode\s+(?:enabled|on)\b|\bnew\s+system\s+prompt\b|(?:^|\n)\s*system\s*:\s|\bsystem\s+(?:update|override|message)\s*:)`)},
	{kind: "act_covertly", description: "asks to act without the user knowing",
		re: regexp.MustCompile(`(?i)\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|notify|alert|mention\s+(?:this\s+)?to)\s+the\s+user\b|\bwithout\s+(?:telling|informing|notifying|alerting)\s+the\s+user\b|\b(?:secretly|covertly|silently)\s+(?:send|forward|email|upload|run|execute|transfer)`)},
	{kind: "exfiltrate", description: "asks to send data somewhere",
		re: regexp.MustCompile(`(?i)\b(?:send|forward|email|upload|post|transfer|leak|exfiltrate)\s+(?:all\s+|the\s+|every\s+|any\s+|my\s+|your\s+|their\s+|these\s+|this\s+)*(?:\w+\s+){0,3}(?:emails?|messages?|files?|data|passwords?|credentials|keys?|tokens?|contacts|documents?|history|conversations?)\s+(?:\w+\s+){0,3}to\s+\S+`)},
	{kind: "hidden_instruction", description: "instruction hidden in markup or special tokens",
		re: regexp.MustCompile(`(?i)<!--[\s\S]{0,500}?(?:instruction|ignore|assistant|system|important)[\s\S]{0,500}?-->|<\|im_start\|>|\[/?INST\]|<\s*/?\s*(?:important|system|instructions?)\s*>|[\x{200B}\x{200C}\x{200D}\x{2060}\x{FEFF}]{2,}`)},
})

// Injection finds prompt-injection markers: attempts to override prior
// instructions, hijack the model's role, act without the user knowing,
// exfiltrate data, and instructions hidden in markup or special tokens.
func Injection(text string) []Finding { return scan(text, injectionRules) }
