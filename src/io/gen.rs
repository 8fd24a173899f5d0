// placeholder until the gen branch lands
use super::Trace;
pub enum Profile {
    SmallFlows,
    BigFlows,
    FourSics,
}
impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "smallflows" => Ok(Profile::SmallFlows),
            "bigflows" => Ok(Profile::BigFlows),
            "4sics" => Ok(Profile::FourSics),
            _ => Err(s.into()),
        }
    }
}
pub struct GenOptions {
    pub count: usize,
}
impl GenOptions {
    pub fn profile(_p: Profile) -> GenOptions {
        GenOptions { count: 1 }
    }
}
pub fn generate(_o: &GenOptions) -> Result<Trace, String> {
    Err("todo".into())
}
