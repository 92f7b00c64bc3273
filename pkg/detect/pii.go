package detect

import (
	"math/big"
	"regexp"
	"strings"
)

var piiRules = prepare([]rule{
	{kind: "email", description: "email address",
		re: regexp.MustCompile(`\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b`)},
	{kind: "us_ssn", description: "US social security number",
		re: regexp.MustCompile(`\b(\d{3})-(\d{2})-(\d{4})\b`), valid: validSSN},
	{kind: "payment_card", description: "payment card number (Luhn-valid)",
		re: regexp.MustCompile(`\b(?:\d[ -]?){12,18}\d\b`), valid: validCard},
	{kind: "iban", description: "international bank account number (IBAN)",
		re: regexp.MustCompile(`\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b`), valid: validIBAN},
	{kind: "phone", description: "phone number",
		re: regexp.MustCompile(`(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\b\d{2,4}[ .-])\d{3,4}[ .-]\d{3,4}\b`), valid: validPhone, standalone: true},
})

// PII finds emails, phone numbers, US SSNs, Luhn-valid payment cards and
// IBANs with a valid checksum.
func PII(text string) []Finding { return scan(text, piiRules) }

func validSSN(s string) bool {
	d := digits(s)
	area, group, serial := d[:3], d[3:5], d[5:]
	return area != "000" && area != "666" && area[0] != '9' && group != "00" && serial != "0000"
}

// validCard checks length, the Luhn sum, and that it is not one digit repeated.
func validCard(s string) bool {
	d := digits(s)
	if len(d) < 13 || len(d) > 19 || strings.Count(d, d[:1]) == len(d) {
		return false
	}
	sum := 0
	for i := len(d) - 1; i >= 0; i-- {
		n := int(d[i] - '0')
		if (len(d)-i)%2 == 0 {
			n *= 2
			if n > 9 {
				n -= 9
			}
		}
		sum += n
	}
	return sum%10 == 0
}

// validIBAN applies the ISO 13616 mod-97 check.
func validIBAN(s string) bool {
	s = strings.ReplaceAll(s, " ", "")
	if len(s) < 15 || len(s) > 34 {
		return false
	}
	rearranged := s[4:] + s[:4]
	var b strings.Builder
	for _, c := range rearranged {
		switch {
		case c >= '0' && c <= '9':
			b.WriteRune(c)
		case c >= 'A' && c <= 'Z':
			b.WriteString(big.NewInt(int64(c - 'A' + 10)).String())
		default:
			return false
		}
	}
	n, ok := new(big.Int).SetString(b.String(), 10)
	return ok && new(big.Int).Mod(n, big.NewInt(97)).Int64() == 1
}

// validPhone wants 10 to 15 digits: fewer are usually not phone numbers.
func validPhone(s string) bool {
	n := len(digits(s))
	return n >= 10 && n <= 15
}
