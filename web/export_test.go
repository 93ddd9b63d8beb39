package web

// LocalPath exposes the sign-in redirect filter to the fuzz test.
var LocalPath = localPath
