package alerts

import "github.com/sluicehq/sluice/internal/mail"

// Mailer sends the email deliveries: the portal's one SMTP sender (package
// mail), shared with sign-up, password reset and key expiry emails.
type Mailer = mail.Sender

// smtpCode is the server's reply code in err, 0 when it did not answer.
func smtpCode(err error) int { return mail.Code(err) }
