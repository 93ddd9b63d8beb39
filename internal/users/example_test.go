package users_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/users"
)

func ExampleValidateSignup() {
	if fe := users.ValidateSignup("dev@example.com", "short"); fe != nil {
		fmt.Println(fe["password"])
	}
	fmt.Println(users.ValidateSignup("dev@example.com", "a long enough password") == nil)
	// Output:
	// must be at least 12 characters
	// true
}

func ExampleHashPassword() {
	hash, err := users.HashPassword("a long enough password")
	if err != nil {
		panic(err)
	}
	fmt.Println(users.CheckPassword(hash, "a long enough password"))
	fmt.Println(users.CheckPassword(hash, "a wrong password"))
	// Output:
	// true
	// false
}
