package ebstest

// UseEndpoint points the standard AWS configuration chain of the test's
// process at url (a Server's, or any fake EBS and EC2 endpoint) with this
// package's credentials, and nothing of the machine's own configuration:
// no shared config or credentials file, profile, session token or
// instance metadata. The variables are restored when the test ends.
func UseEndpoint(t interface{ Setenv(key, value string) }, url string) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": AccessKey, "AWS_SECRET_ACCESS_KEY": SecretKey,
		"AWS_REGION": Region, "AWS_ENDPOINT_URL_EBS": url, "AWS_ENDPOINT_URL_EC2": url,
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
		"AWS_PROFILE": "", "AWS_SESSION_TOKEN": "",
	} {
		t.Setenv(k, v)
	}
}
