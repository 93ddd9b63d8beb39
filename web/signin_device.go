package web

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/signin"
)

// deviceCookie holds the browser's device tokens (package signin): proof
// that it signed in before, so that guesses from elsewhere do not slow its
// sign-ins down. It is sent to the sign-in form only.
const deviceCookie = "sluice_device"

// signedInDevice is the device a signed-in session counts as when it
// confirms its password (changing it): the session proves a past sign-in.
const signedInDevice = "signed-in"

// signInClient is who attempts to sign in to email with r: its address and
// the device its cookie proves for that account, if any.
func (s *Server) signInClient(r *http.Request, email string) signin.Client {
	c := signin.Client{Addr: s.clientAddr(r)}
	if ck, err := r.Cookie(deviceCookie); err == nil {
		c.Device = s.devices.Device(email, ck.Value, s.now())
	}
	return c
}

// rememberDevice renews the browser's device cookie after the right
// password for email.
func (s *Server) rememberDevice(w http.ResponseWriter, r *http.Request, email string) {
	old := ""
	if ck, err := r.Cookie(deviceCookie); err == nil {
		old = ck.Value
	}
	http.SetCookie(w, &http.Cookie{
		Name:     deviceCookie,
		Value:    s.devices.Remember(email, old, s.now()),
		Path:     "/signin",
		MaxAge:   int(signin.DeviceLifetime / time.Second),
		HttpOnly: true,
		Secure:   s.secureRequest(r),
		SameSite: http.SameSiteStrictMode,
	})
}
