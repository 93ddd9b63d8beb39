package users

import (
	_ "embed"
	"strings"
	"unicode/utf8"
)

// commonPasswords is a list of the most common and breached passwords and
// of the words they are made from, shipped inside the binary so the check
// works offline.
//
//go:embed common_passwords.txt
var commonPasswords string

// isCommon reports whether pw (lowercase) is on the list.
func isCommon(pw string) bool {
	for line := range strings.Lines(commonPasswords) {
		line = strings.TrimSuffix(line, "\n")
		if line == pw && !strings.HasPrefix(line, "#") {
			return true
		}
	}
	return false
}

// unleet (read-only) undoes the substitutions people use to dress up a common word
// (p@ssw0rd, $ecret).
var unleet = strings.NewReplacer("@", "a", "4", "a", "0", "o", "1", "i", "!", "i", "3", "e", "$", "s", "5", "s", "7", "t")

// sequences (read-only) are runs people type as a password: the alphabet, digits and
// keyboard rows and columns, forwards and backwards.
var sequences = []string{
	"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz",
	"012345678901234567890123456789",
	"qwertyuiopasdfghjklzxcvbnmqwertyuiop",
	"qwertzuiopasdfghjklyxcvbnm",
	"azertyuiopqsdfghjklmwxcvbn",
	"1qaz2wsx3edc4rfv5tgb6yhn7ujm8ik9ol0p",
	"1q2w3e4r5t6y7u8i9o0p",
	"zaq1xsw2cde3vfr4bgt5nhy6mju7",
	"!@#$%^&*()_+",
}

// weakness says why pw is easy to guess, or "" when it is not. email is
// the account's address; pw and email are already within their lengths.
func weakness(email, pw string) string {
	lower := strings.ToLower(strings.TrimSpace(pw))
	if lower == "" {
		return "must not be only spaces"
	}
	if r, _ := utf8.DecodeRuneInString(pw); strings.Count(pw, string(r)) == utf8.RuneCountInString(pw) {
		return "must not be one character repeated"
	}
	if unit := shortestRepeat(lower); unit != "" && utf8.RuneCountInString(unit) <= 4 {
		return "must not be a short pattern repeated"
	}
	for _, seq := range sequences {
		if strings.Contains(seq, lower) || strings.Contains(reverse(seq), lower) {
			return "must not be a run of keys or letters in order"
		}
	}
	email = strings.ToLower(strings.TrimSpace(email))
	local, _, _ := strings.Cut(email, "@")
	if lower == email || (len(local) >= 4 && strings.Trim(lower, padding) == local) {
		return "must not be your email address"
	}
	if isCommon(lower) || isCommon(unleet.Replace(lower)) {
		return "is too common: it is on the list of the most used passwords"
	}
	// A common word padded with digits and symbols ("password1234",
	// "!!qwerty2024") is as easy to guess as the word.
	base := strings.Trim(lower, padding)
	if base != lower && utf8.RuneCountInString(base) >= 3 && (isCommon(base) || isCommon(unleet.Replace(base)) || shortestRepeat(base) != "") {
		return "is too common: a common word with digits or symbols added"
	}
	return ""
}

// padding is what people add around a word to meet a length rule.
const padding = "0123456789!@#$%^&*()_+-=.,?~ "

// shortestRepeat returns the unit s is two or more copies of, or "".
func shortestRepeat(s string) string {
	for n := 1; n <= len(s)/2; n++ {
		if len(s)%n == 0 && strings.Repeat(s[:n], len(s)/n) == s {
			return s[:n]
		}
	}
	return ""
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}
