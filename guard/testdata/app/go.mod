module example.com/app

go 1.26.0

require github.com/sluicehq/sluice v0.0.0

// guard's test points this at the checkout under test.
replace github.com/sluicehq/sluice => ../../..
